"""The summary's figures (matplotlib, Agg): throughput with its spread, time per epoch,
GPU and host memory per setup, and every run's loss curve on one chart. A figure whose
metric no run has is skipped, with the reason, never drawn empty."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zerolab.files import save_png
from zerolab.summarize.collect import SETUP_ORDER, Collection
from zerolab.summarize.columns import COLUMNS
from zerolab.summarize.summary import RunSummary

DPI = 130


def _save(fig: Any, path: Path) -> None:
    """Save through a temporary file, so a PNG is never half-written."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    save_png(fig, path, dpi=DPI)
    plt.close(fig)


def _label(summary: RunSummary) -> str:
    name, setup = summary.row["name"], summary.row["setup"]
    return f"{name}\n({setup})" if setup and setup not in name else name


def _colors(runs: list[RunSummary]) -> list[Any]:
    import matplotlib

    palette = matplotlib.colormaps["tab10"]
    setups = [s.row["setup"] for s in runs]
    order = list(SETUP_ORDER) + sorted({s for s in setups if s and s not in SETUP_ORDER})
    return [palette(order.index(s) % 10) if s else (0.6, 0.6, 0.6, 1.0) for s in setups]


def _duration_unit(seconds: list[float]) -> tuple[str, float]:
    largest = max(seconds)
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if largest >= 2 * size:
            return unit, size
    return "seconds", 1.0


def _bar_chart(
    runs: list[RunSummary],
    value: Callable[[dict[str, Any]], float],
    title: str,
    ylabel: str,
    path: Path,
    subtitle: str,
    spread: tuple[str, str] | None = None,
    value_format: str = "{:.3g}",
) -> None:
    import matplotlib.pyplot as plt

    heights = [value(s.row) for s in runs]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(runs) + 2.5), 4.8))
    errors = None
    if spread:
        low = [
            h - (s.row[spread[0]] if s.row[spread[0]] is not None else h)
            for h, s in zip(heights, runs, strict=True)
        ]
        high = [
            (s.row[spread[1]] if s.row[spread[1]] is not None else h) - h
            for h, s in zip(heights, runs, strict=True)
        ]
        errors = [low, high]
    positions = range(len(runs))
    bars = ax.bar(
        positions, heights, color=_colors(runs), yerr=errors, capsize=6, edgecolor="black", linewidth=0.6
    )
    tops = [
        h + (e if errors else 0.0) for h, e in zip(heights, errors[1] if errors else heights, strict=True)
    ]
    for bar, height, top in zip(bars, heights, tops, strict=True):
        ax.annotate(
            value_format.format(height),
            (bar.get_x() + bar.get_width() / 2, top),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    ax.margins(y=0.12)
    rotate = len(runs) > 6
    ax.set_xticks(
        list(positions),
        [_label(s) for s in runs],
        rotation=30 if rotate else 0,
        ha="right" if rotate else "center",
    )
    ax.set_ylabel(ylabel)
    width_chars = int(fig.get_figwidth() * 13)
    ax.set_title(f"{title}\n" + "\n".join(textwrap.wrap(subtitle, width_chars)), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    _save(fig, path)


def _loss_chart(runs: list[RunSummary], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 4.8))
    styles = ["-", "--", "-.", ":"]
    for index, (summary, color) in enumerate(zip(runs, _colors(runs), strict=True)):
        iterations, losses = summary.loss_curve
        ax.plot(
            iterations,
            losses,
            styles[index % len(styles)],
            marker="o",
            markersize=3,
            color=color,
            label=_label(summary).replace("\n", " "),
        )
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss (lm loss, per logged interval)")
    ax.set_title("Training loss of every run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    _save(fig, path)


def write_plots(collection: Collection, out: Path) -> tuple[list[Path], list[str]]:
    """Write the PNGs into `out`; returns (files written, plots skipped with the reason)."""
    import matplotlib

    matplotlib.use("Agg")
    written: list[Path] = []
    skipped: list[str] = []
    warmup = collection.options.warmup.describe()

    def with_metric(key: str) -> list[RunSummary]:
        return [s for s in collection.runs if s.row[key] is not None]

    for column in COLUMNS:
        if column.plot is None:
            continue
        plot, runs = column.plot, with_metric(column.key)
        if not runs:
            skipped.append(f"{plot.file}: no run has {column.key}")
            continue
        scale, ylabel = 1.0, column.label
        if plot.durations:
            unit, scale = _duration_unit([s.row[column.key] for s in runs])
            ylabel = f"{column.label} ({unit})"
        _bar_chart(
            runs,
            lambda row, key=column.key, scale=scale: row[key] / scale,
            title=f"{plot.title} ({column.better_words})",
            ylabel=ylabel,
            path=out / plot.file,
            subtitle=plot.subtitle.format(warmup=warmup),
            spread=plot.spread,
            value_format=plot.bar_text,
        )
        written.append(out / plot.file)
    curves = [s for s in collection.runs if len(s.loss_curve[0]) >= 2]
    if curves:
        _loss_chart(curves, out / "loss.png")
        written.append(out / "loss.png")
    else:
        skipped.append("loss.png: no run logged a loss at two or more iterations")
    return written, skipped
