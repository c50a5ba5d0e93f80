"""A sweep's figures (matplotlib, Agg): for each swept key, one figure of every sweep metric
(tokens/s per GPU with its 10th-90th percentile, max allocated GPU memory, peak host memory, the
last training loss) against that key, one line per combination of the other swept keys; the y
axes of throughput and memory start at 0 (the loss's does not, and says so). Only
completed cells are drawn; a value whose cells were refused or failed says so under its tick.
A numeric key is a numeric axis (log 2 when it spans 8x or more) with each series a line; any
other key is one tick per value in sweep order, its points unjoined (the values have no order
between them) and, with several series, set side by side around the tick."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.files import save_png
from zerolab.rundir import COMPLETED
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import COLUMNS, Column
from zerolab.summarize.summary import RunSummary
from zerolab.sweep.plan import Plan
from zerolab.sweep.values import is_number, value_text

DPI = 130
METRICS = ("tokens_per_s_per_gpu", "max_allocated_GiB", "peak_host_GiB", "last_loss")
"""The row keys drawn against each swept key, one panel each."""
SPREAD = {"tokens_per_s_per_gpu": ("tokens_per_s_per_gpu_p10", "tokens_per_s_per_gpu_p90")}
PANEL_TITLES = {
    "tokens_per_s_per_gpu": (
        "Training throughput per GPU",
        "steady-state median, whiskers: 10th-90th percentile",
    ),
    "max_allocated_GiB": (
        "Peak accelerator memory allocated per GPU",
        "largest over ranks (CPU runs: DeepSpeed's process memory)",
    ),
    "peak_host_GiB": ("Peak host memory", "the launcher's process tree"),
    "last_loss": ("Training loss", "at the last logged interval; y axis not from 0"),
}
"""Each panel's title and what its value is."""
FROM_ZERO = ("tokens_per_s_per_gpu", "max_allocated_GiB", "peak_host_GiB")
"""Panels whose y axis starts at 0, so that a bar's height reads as a ratio; the loss's does not
(its differences matter, not its distance from 0) and its title says so."""
MIN_RELATIVE_SPAN = 0.04
"""A panel's y axis spans at least this fraction of its values."""
"""Only rows of this status are drawn as measurements."""
DODGE = 0.5
"""On a categorical axis, the width around a tick that its series' points spread over."""


@dataclass(frozen=True)
class Point:
    """One drawn measurement: the x position, the value, and its whisker ends (if any)."""

    x: float
    y: float
    low: float | None = None
    high: float | None = None


def plot_file(label: str, key: str, several: bool) -> str:
    """`sweep-KEY.png`, prefixed by the sweep's label (SweepRuns.label) when the summary holds
    several sweeps."""
    stem = f"sweep-{label}-{key}" if several else f"sweep-{key}"
    return stem.replace("/", "_") + ".png"


def axis(plan: Plan, key: str) -> tuple[list[Any], list[float], str]:
    """The swept values of `key` in sweep order, their x positions, and the axis's scale:
    `categorical` (one position per value, in sweep order), or for numbers `linear`, or `log2`
    when every value is positive and they span 8x or more."""
    values = next(entry.values for entry in plan.swept if entry.key == key)
    if all(is_number(value) for value in values):
        numbers = [float(value) for value in values]
        return values, numbers, "log2" if min(numbers) > 0 and max(numbers) / min(numbers) >= 8 else "linear"
    return values, [float(index) for index in range(len(values))], "categorical"


def series(plan: Plan, key: str, rows: list[RunSummary]) -> Iterator[tuple[str, list[RunSummary]]]:
    """The rows of the sweep grouped by the values of its other keys (sweep order), with a label
    such as `zero=z1`; one unlabelled group when `key` is the only key."""
    others = [other for other in plan.keys if other != key]
    groups: dict[tuple[str, ...], list[RunSummary]] = {}
    for cell in plan.cells:
        groups.setdefault(tuple(value_text(cell.values[other]) for other in others), [])
    for summary in rows:
        values = summary.row.sweep
        groups[tuple(value_text(values[other]) for other in others)].append(summary)
    for combination, members in groups.items():
        label = ", ".join(f"{other}={value}" for other, value in zip(others, combination, strict=True))
        yield label, members


def points(metric: str, key: str, xs: dict[str, float], rows: list[RunSummary]) -> list[Point]:
    """The completed rows' values of `metric` at their x positions (rows without it left out)."""
    drawn = []
    for summary in rows:
        row = summary.row
        if row.status != COMPLETED or row[metric] is None:
            continue
        low, high = (row[end] for end in SPREAD[metric]) if metric in SPREAD else (None, None)
        drawn.append(Point(xs[value_text(row.sweep[key])], row[metric], low, high))
    return sorted(drawn, key=lambda point: point.x)


def not_drawn(key: str, rows: list[RunSummary]) -> dict[str, list[str]]:
    """Per value of `key` (as text), the status of each of its cells that is not a measurement."""
    missing: dict[str, list[str]] = {}
    for summary in rows:
        if summary.row.status != COMPLETED:
            missing.setdefault(value_text(summary.row.sweep[key]), []).append(summary.row.status)
    return missing


def write_sweep_plots(collection: Collection, out: Path) -> tuple[list[Path], list[str]]:
    """Write each sweep's figures into `out`; returns (files written, figures skipped with why)."""
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    skipped: list[str] = []
    several = len(collection.sweeps) > 1
    for sweep in collection.sweeps:
        plan, rows = sweep.plan, sweep.runs
        for key in plan.keys:
            path = out / plot_file(sweep.label, key, several)
            if not any(s.row.status == COMPLETED for s in rows):
                skipped.append(f"{path.name}: no cell of sweep {plan.name} completed")
                continue
            figure = sweep_figure(plan, key, rows)
            save_png(figure, path, dpi=DPI)
            plt.close(figure)
            written.append(path)
    return written, skipped


def _column(key: str) -> Column:
    return next(column for column in COLUMNS if column.key == key)


def sweep_figure(plan: Plan, key: str, rows: list[RunSummary]) -> Any:
    """The figure of every sweep metric against the swept `key` (one panel each)."""
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    import matplotlib
    import matplotlib.pyplot as plt

    values, positions, scale = axis(plan, key)
    xs = {value_text(value): x for value, x in zip(values, positions, strict=True)}
    groups = list(series(plan, key, rows))
    measured = [label for label, members in groups if any(m.row.status == COMPLETED for m in members)]
    missing = not_drawn(key, rows)
    fig, axes = plt.subplots(2, 2, figsize=(12.0, 8.2), sharex=True, layout="constrained")
    palette = matplotlib.colormaps["tab10"]
    for panel, metric in zip(axes.flat, METRICS, strict=True):
        column = _column(metric)
        drawn = False
        for index, (label, members) in enumerate(groups):
            found = points(metric, key, xs, members)
            if not found:
                continue
            drawn = True
            at = {point.x: point for point in found}
            line = [at.get(x) for x in positions]  # None: no measurement there, a gap in the line
            shift = _dodge(measured.index(label), len(measured)) if scale == "categorical" else 0.0
            ys = [point.y if point else math.nan for point in line]
            errors = None
            if metric in SPREAD:
                errors = [
                    [point.y - point.low if point and point.low is not None else 0.0 for point in line],
                    [point.high - point.y if point and point.high is not None else 0.0 for point in line],
                ]
            panel.errorbar(
                [x + shift for x in positions],
                ys,
                yerr=errors,
                linestyle="none" if scale == "categorical" else "-",
                marker="o",
                markersize=5,
                capsize=4,
                color=palette(index % 10),
                label=label or None,
            )
        if not drawn:
            panel.text(
                0.5, 0.5, "no completed cell reported it", ha="center", va="center", transform=panel.transAxes
            )
        title, detail = PANEL_TITLES[metric]
        panel.set_title(f"{title} ({column.better_words})\n{detail}", fontsize=10)
        panel.set_ylabel(column.label or metric)
        panel.grid(alpha=0.3)
        panel.margins(y=0.15)
        panel.ticklabel_format(axis="y", style="plain", useOffset=False)  # no offset such as `1e-6+8.6353`
        if metric in FROM_ZERO:
            panel.set_ylim(bottom=0)
        else:
            _at_least_relative_span(panel)
    low, high = min(positions), max(positions)
    if scale == "log2":
        axes.flat[0].set_xscale("log", base=2)
        pad = 2 ** (0.08 * math.log2(high / low))
        axes.flat[0].set_xlim(low / pad, high * pad)
    elif scale == "categorical":
        axes.flat[0].set_xlim(-0.5, len(values) - 0.5)
    else:
        pad = 0.08 * ((high - low) or 1.0)
        axes.flat[0].set_xlim(low - pad, high + pad)
    rotate = len(values) > 6 or max(len(value_text(value)) for value in values) > 12
    for panel in axes[1]:
        panel.set_xticks(positions, [_tick(value, missing) for value in values])
        panel.minorticks_off()
        panel.set_xlabel(key)
        if rotate:
            plt.setp(panel.get_xticklabels(), rotation=25, ha="right", rotation_mode="anchor")
    labelled = [label for label, _ in groups if label]
    if labelled:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(
            handles,
            labels,
            loc="outside right center",
            fontsize=8,
            title="other swept keys",
            title_fontsize=8,
        )
    statuses = [status for found in missing.values() for status in found]
    counts = ", ".join(f"{statuses.count(state)} {state}" for state in dict.fromkeys(statuses))
    note = "completed cells only" + (f"; not drawn: {counts} (summary.md has each cause)" if counts else "")
    fig.suptitle(f"Sweep {plan.name}: each metric against {key}\n{note}", fontsize=11)
    return fig


def _dodge(index: int, count: int) -> float:
    """The offset from its tick of series `index` of the `count` series drawn on a categorical
    axis (a series with no completed cell takes no place)."""
    if count < 2:
        return 0.0
    return DODGE * (index / (count - 1) - 0.5)


def _at_least_relative_span(panel: Any) -> None:
    """A y range of at least MIN_RELATIVE_SPAN of its middle: equal values read as a flat line,
    not as a difference."""
    bottom, top = panel.get_ylim()
    middle, half = (bottom + top) / 2, (top - bottom) / 2
    least = MIN_RELATIVE_SPAN * abs(middle) / 2
    if half < least:
        panel.set_ylim(middle - least, middle + least)


def _tick(value: Any, missing: dict[str, list[str]]) -> str:
    """A tick's label: the value, and the statuses of its cells not drawn."""
    text = value_text(value)
    statuses = missing.get(value_text(value), [])
    if statuses:
        text += "\n(" + ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses)) + ")"
    return text
