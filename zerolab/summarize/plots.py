"""The summary's figures (matplotlib, Agg): horizontal bars of throughput with its spread, time per
epoch, GPU and host memory, one bar per completed run, and every run's loss curve on one chart.

A run that did not complete has no bar (its numbers stop where it stopped, and a failed run's low
memory would read as the best): the figure names it under the bars. The loss chart keeps such a
run's curve, marked with its status and a cross where it stopped. Each run keeps its colour and
line style in every figure. Every text fits the figure, whatever the number of runs and the length
of their names: long names are wrapped and shortened in the middle, figures grow with the runs,
and the legend sits below the axes. A figure whose metric no completed run has is skipped, with
the reason, never drawn empty."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.files import save_png
from zerolab.rundir import COMPLETED
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import COLUMNS, STATUS_LABELS
from zerolab.summarize.summary import RunSummary

DPI = 130
WIDTH_IN = 9.0
FONT_PT = 9.0
CHAR_IN = FONT_PT * 0.62 / 72
"""The width of one character of FONT_PT text, a little over the average (DejaVu Sans)."""
LINE_IN = FONT_PT * 1.35 / 72
LABEL_CHARS = 32
"""A bar's label: run names wrapped at this many characters, at most LABEL_LINES lines."""
LABEL_LINES = 2
LEGEND_CHARS = 40
"""A run's name in a legend or note: at most this many characters."""
LEGEND_PT = FONT_PT - 1
WIDE_LEGEND_RUNS = 8
"""With more runs than this, the loss figure widens (up to MAX_WIDTH_IN) to give its legend two columns."""
MAX_WIDTH_IN = 13.0
NOTE_NAMES = 8
"""Runs named in a figure's `not drawn` note; more are counted."""
LOG_SCALE_RATIO = 10.0
"""The loss chart's x axis is logarithmic when the runs' last iterations differ this much."""
COLORS = "tab10"
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P")


@dataclass(frozen=True)
class Style:
    """How a run is drawn in every figure."""

    color: Any
    linestyle: str
    marker: str


def styles(runs: list[RunSummary]) -> dict[int, Style]:
    """A distinct style per run (by id): ten colours, then the line style, then the marker changes."""
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    import matplotlib

    palette = matplotlib.colormaps[COLORS]
    return {
        id(summary): Style(
            palette(index % 10),
            LINESTYLES[(index // 10) % len(LINESTYLES)],
            MARKERS[(index // (10 * len(LINESTYLES))) % len(MARKERS)],
        )
        for index, summary in enumerate(runs)
    }


def shorten(text: str, width: int, lines: int = 1) -> list[str]:
    """`text` wrapped at `width` characters in at most `lines` lines, its middle left out (`…`) when
    it is longer (the end of a run name tells runs apart as often as its start)."""
    wrap = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    if len(wrap) <= lines:
        return wrap
    keep = width * lines - 1
    head = (keep + 1) // 2
    short = f"{text[:head]}…{text[len(text) - (keep - head) :]}"
    return [short[i : i + width] for i in range(0, len(short), width)]


def _completed(summary: RunSummary) -> bool:
    return summary.row.status == COMPLETED


def _with_status(summary: RunSummary) -> str:
    """`name (failed)`: a run that did not complete, with its status."""
    return f"{shorten(summary.row.name, LEGEND_CHARS)[0]} ({STATUS_LABELS[summary.row.status]})"


def _not_drawn(runs: list[RunSummary]) -> str:
    names = [_with_status(summary) for summary in runs[:NOTE_NAMES]]
    more = len(runs) - NOTE_NAMES
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _wrapped(text: str, width_in: float, scale: float = 1.0) -> str:
    """`text` wrapped to lines that fit `width_in` inches at FONT_PT x `scale`."""
    chars = max(20, int(width_in / (CHAR_IN * scale)))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=True))


def _figure(height_in: float, width_in: float = WIDTH_IN) -> Any:
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def _duration_unit(seconds: list[float]) -> tuple[str, float]:
    largest = max(seconds)
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if largest >= 2 * size:
            return unit, size
    return "seconds", 1.0


def _bar_label(summary: RunSummary) -> str:
    name, setup = summary.row.name, summary.row.setup
    lines = shorten(name, LABEL_CHARS, LABEL_LINES)
    if setup and setup not in name:
        lines.append(f"({shorten(setup, LABEL_CHARS - 2)[0]})")
    return "\n".join(lines)


def _bar_chart(
    runs: list[RunSummary],
    run_styles: dict[int, Style],
    key: str,
    scale: float,
    title: str,
    axis_label: str,
    subtitle: str,
    note: str,
    spread: tuple[str, str] | None = None,
    value_format: str = "{:.3g}",
) -> Any:
    """One horizontal bar per run (row[key] / scale), top to bottom in the summary's order, the
    value at its end, and whiskers from the row's `spread` keys."""
    labels = [_bar_label(summary) for summary in runs]
    slot_in = max(0.42, LINE_IN * max(label.count("\n") + 1 for label in labels) + 0.14)
    heading = f"{title}\n{_wrapped(subtitle, WIDTH_IN - 0.3, 10 / FONT_PT)}"
    footer = _wrapped(note, WIDTH_IN - 0.3) if note else ""
    text_lines = heading.count("\n") + 1 + (footer.count("\n") + 1 if footer else 0)
    figure = _figure(1.0 + slot_in * len(runs) + (10 / FONT_PT) * LINE_IN * text_lines)
    ax = figure.add_subplot()
    widths = [summary.row[key] / scale for summary in runs]
    errors = None
    if spread:
        lows, highs = ([summary.row[end] for summary in runs] for end in spread)
        errors = [
            [
                max(0.0, width - low / scale) if low is not None else 0.0
                for width, low in zip(widths, lows, strict=True)
            ],
            [
                max(0.0, high / scale - width) if high is not None else 0.0
                for width, high in zip(widths, highs, strict=True)
            ],
        ]
    positions = list(range(len(runs)))
    bars = ax.barh(
        positions,
        widths,
        color=[run_styles[id(summary)].color for summary in runs],
        xerr=errors,
        capsize=4,
        edgecolor="black",
        linewidth=0.6,
        height=0.7,
    )
    ends = [w + (errors[1][i] if errors else 0.0) for i, w in enumerate(widths)]
    for bar, width, end in zip(bars, widths, ends, strict=True):
        ax.annotate(
            value_format.format(width),
            (end, bar.get_y() + bar.get_height() / 2),
            xytext=(4, 0),
            textcoords="offset points",
            ha="left",
            va="center",
            fontsize=FONT_PT,
        )
    ax.set_xlim(0, max(ends) * 1.25 if max(ends) > 0 else 1.0)
    ax.set_yticks(positions, labels, fontsize=FONT_PT)
    ax.set_ylim(len(runs) - 0.5, -0.5)
    ax.set_xlabel(axis_label)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    figure.suptitle(heading, fontsize=10)
    if footer:
        figure.supxlabel(footer, fontsize=FONT_PT, color="dimgray")
    return figure


def _legend_label(summary: RunSummary) -> str:
    name, setup = summary.row.name, summary.row.setup
    parts = [setup] if setup and setup not in name else []
    parts += [] if _completed(summary) else [STATUS_LABELS[summary.row.status]]
    return shorten(name, LEGEND_CHARS)[0] + (f" ({', '.join(parts)})" if parts else "")


def _loss_chart(runs: list[RunSummary], run_styles: dict[int, Style]) -> Any:
    """Every run's loss per logged interval; a cross where a run that did not complete stopped."""
    labels = [_legend_label(summary) for summary in runs]
    column_in = CHAR_IN * LEGEND_PT / FONT_PT * max(len(label) for label in labels) + 0.9
    width_in = WIDTH_IN
    if len(runs) > WIDE_LEGEND_RUNS:
        width_in = min(MAX_WIDTH_IN, max(WIDTH_IN, 2 * column_in + 0.4))
    columns = max(1, min(len(runs), int((width_in - 0.3) // column_in)))
    rows = math.ceil(len(runs) / columns)
    stopped = [summary for summary in runs if not _completed(summary)]
    figure = _figure(4.6 + LINE_IN * LEGEND_PT / FONT_PT * 1.3 * (rows + (1 if stopped else 0)), width_in)
    ax = figure.add_subplot()
    for summary, label in zip(runs, labels, strict=True):
        style = run_styles[id(summary)]
        iterations, losses = summary.loss_curve
        ax.plot(
            iterations,
            losses,
            linestyle=style.linestyle,
            marker=style.marker,
            markersize=3,
            color=style.color,
            label=label,
        )
        if not _completed(summary):
            ax.plot(iterations[-1:], losses[-1:], "X", markersize=9, color=style.color, label="_stopped")
    lasts = [summary.loss_curve[0][-1] for summary in runs]
    firsts = [summary.loss_curve[0][0] for summary in runs]
    ratio = max(lasts) / min(lasts) if min(firsts) > 0 else 1.0
    if ratio >= LOG_SCALE_RATIO:
        ax.set_xscale("log")
        ax.set_xlabel(f"iteration (log scale: the runs' last iterations differ {ratio:,.0f}-fold)")
    else:
        ax.set_xlabel("iteration")
    tasks = sorted({summary.row.task for summary in runs if summary.row.task})
    pretraining = any(not summary.row.task for summary in runs)
    kinds = (["lm loss"] if pretraining else []) + [f"{task} loss" for task in tasks]  # fine-tuning's task
    ax.set_ylabel(f"training loss ({', '.join(kinds)}, per logged interval)")
    ax.grid(alpha=0.3)
    figure.suptitle("Training loss of every run", fontsize=10)
    figure.legend(
        loc="outside lower center",
        ncols=columns,
        fontsize=LEGEND_PT,
        handlelength=4.0,
        frameon=False,
        title="X: where a run that did not complete stopped" if stopped else None,
        title_fontsize=LEGEND_PT,
    )
    return figure


def write_plots(collection: Collection, out: Path) -> tuple[list[Path], list[str]]:
    """Write the PNGs into `out`; returns (files written, plots skipped with the reason)."""
    written: list[Path] = []
    skipped: list[str] = []
    warmup = collection.options.warmup.describe()
    run_styles = styles(collection.runs)
    for column in COLUMNS:
        if column.plot is None:
            continue
        plot = column.plot
        runs = [
            summary
            for summary in collection.runs
            if _completed(summary) and summary.row[column.key] is not None
        ]
        left_out = [
            summary for summary in collection.runs if not _completed(summary)
        ]  # named in every figure
        if not runs:
            why = f" (not drawn: {_not_drawn(left_out)})" if left_out else ""
            skipped.append(f"{plot.file}: no {'completed ' if left_out else ''}run has {column.key}{why}")
            continue
        scale, axis_label = 1.0, column.label or column.key
        if plot.durations:
            unit, scale = _duration_unit([summary.row[column.key] for summary in runs])
            axis_label = f"{axis_label} ({unit})"
        figure = _bar_chart(
            runs,
            run_styles,
            column.key,
            scale,
            title=f"{plot.title} ({column.better_words})",
            axis_label=axis_label,
            subtitle=plot.subtitle.format(warmup=warmup),
            note=f"not drawn (did not complete): {_not_drawn(left_out)}" if left_out else "",
            spread=plot.spread,
            value_format=plot.bar_text,
        )
        save_png(figure, out / plot.file, dpi=DPI)
        written.append(out / plot.file)
    curves = [summary for summary in collection.runs if len(summary.loss_curve[0]) >= 2]
    if curves:
        save_png(_loss_chart(curves, run_styles), out / "loss.png", dpi=DPI)
        written.append(out / "loss.png")
    else:
        skipped.append("loss.png: no run logged a loss at two or more iterations")
    return written, skipped
