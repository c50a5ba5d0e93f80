"""The summary's plots say what is true and can be read: only completed runs' measurements are
drawn as bars (the others are named as not drawn), every run has its own line style in the loss
plot, the x axis shows runs of very different lengths, and every text fits the figure, with few
runs and many, short names and long ones."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from summarize_helpers import CPU, REAL, make_run_dir

from zerolab.summarize import plots
from zerolab.summarize.collect import summarize_paths
from zerolab.summarize.summary import Options

BAR_PLOTS = ("throughput.png", "epoch_time.png", "gpu_memory.png", "host_memory.png")
STUDY = ("final_z0", "final_z1", "final_z2", "final_z3", "final_z3off")
FAILED = ("fp16_z2", "signal_sigkill_rank1")  # a launch that never trained; a rank killed after 3 iterations


@pytest.fixture
def drawn(monkeypatch) -> dict[str, Any]:
    """The figures write_plots saves, by file name (drawn as saved)."""
    figures: dict[str, Any] = {}
    save = plots.save_png

    def keep(figure: Any, path: Path, **options: Any) -> None:
        figures[path.name] = figure
        save(figure, path, **options)

    monkeypatch.setattr(plots, "save_png", keep)
    return figures


def _write(root: Path, out: Path) -> tuple[list[Path], list[str]]:
    collection = summarize_paths([root], Options())
    out.mkdir()
    return plots.write_plots(collection, out)


def _draw(figure: Any) -> Any:
    """Draw `figure` as it is saved (Agg), and return its renderer."""
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def _texts(figure: Any) -> list[Any]:
    """Every text the figure draws (tick labels only for ticks inside the axes' view)."""
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    from matplotlib.text import Text

    hidden = set()
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in (*axis.get_major_ticks(), *axis.get_minor_ticks()):
                if not low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low):
                    hidden.update((id(tick.label1), id(tick.label2)))
    return [
        text
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and id(text) not in hidden
    ]


def assert_texts_fit(figure: Any, name: str) -> None:
    """Every text lies inside the figure, no two tick labels of an axis overlap, and a legend lies
    outside the axes (it hides no curve)."""
    renderer = _draw(figure)
    box = figure.bbox
    for text in _texts(figure):
        extent = text.get_window_extent(renderer)
        inside = box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1
        inside = inside and box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1
        assert inside, f"{name}: {text.get_text()!r} at {extent} outside the figure {box}"
    texts = {id(text) for text in _texts(figure)}
    for ax in figure.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            extents = [label.get_window_extent(renderer) for label in labels if id(label) in texts]
            for one, other in itertools.combinations(extents, 2):
                assert not one.overlaps(other), f"{name}: tick labels overlap: {one} {other}"
        for legend in [*figure.legends, *([ax.get_legend()] if ax.get_legend() else [])]:
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), name


def _bar_labels(figure: Any) -> str:
    ax = figure.axes[0]
    return " ".join(label.get_text() for label in [*ax.get_xticklabels(), *ax.get_yticklabels()])


def _all_text(figure: Any) -> str:
    return " ".join(" ".join(text.get_text().split()) for text in _texts(figure))


def test_bars_are_drawn_for_completed_runs_only_and_the_others_are_named(tmp_path: Path, drawn):
    for name in (*STUDY, *FAILED):
        make_run_dir(tmp_path / "logs", name, name)
    written, _ = _write(tmp_path / "logs", tmp_path / "out")
    assert {path.name for path in written} == {*BAR_PLOTS, "loss.png"}
    for plot in BAR_PLOTS:
        figure = drawn[plot]
        _draw(figure)
        labels = _bar_labels(figure)
        assert all(name in labels for name in STUDY), (plot, labels)
        assert not any(name in labels for name in FAILED), (plot, labels)
        text = _all_text(figure)
        assert "not drawn (did not complete):" in text, plot
        # every run that did not complete is named, also one with no figure for this plot (fp16_z2)
        assert "signal_sigkill_rank1 (failed)" in text and "fp16_z2 (failed)" in text, plot
    # fp16_z2 never trained: its 0.43 GiB, the lowest, is no figure at all, let alone a bar
    memory = _all_text(drawn["gpu_memory.png"])
    assert "0.43" not in memory


def test_a_plot_with_no_completed_run_is_skipped_with_the_reason(tmp_path: Path, drawn):
    make_run_dir(tmp_path / "logs", "fp16_z2", "fp16_z2")
    make_run_dir(tmp_path / "logs", "killed", "signal_sigkill_rank1")
    written, skipped = _write(tmp_path / "logs", tmp_path / "out")
    reason = "no completed run has max_allocated_GiB (not drawn: killed (failed), fp16_z2 (failed))"
    assert f"gpu_memory.png: {reason}" in skipped
    assert [path.name for path in written] == ["loss.png"]  # the killed run's loss, marked as failed


def test_the_loss_plot_gives_each_run_its_own_style_and_marks_runs_that_did_not_complete(
    tmp_path: Path, drawn
):
    logs = sorted(CPU.glob("*.log")) + sorted(REAL.glob("*.log"))
    for log in logs:
        make_run_dir(tmp_path / "logs", log.stem, log)
    _write(tmp_path / "logs", tmp_path / "out")
    ax = drawn["loss.png"].axes[0]
    curves = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(curves) > 20
    styles = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in curves}
    assert len(styles) == len(curves), "two runs share a colour and line style"
    labels = {line.get_label() for line in curves}
    assert "signal_sigkill_rank1 (z0, failed)" in labels and "final_z1" in labels


def test_runs_of_very_different_lengths_all_show_on_the_loss_plot(tmp_path: Path, drawn):
    for name in STUDY:  # iterations 5-20
        make_run_dir(tmp_path / "logs", name, name)
    make_run_dir(tmp_path / "logs", "gpt3", REAL / "megatronds_gpt3-175b-tgs-validation.log")  # 5-2400
    _write(tmp_path / "logs", tmp_path / "out")
    figure = drawn["loss.png"]
    _draw(figure)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    width = ax.get_window_extent().width
    for line in ax.get_lines():
        xs = line.get_xdata()
        if len(xs) < 2:
            continue
        low, high = ax.transData.transform([(min(xs), 1), (max(xs), 1)])[:, 0]
        assert (high - low) / width > 0.1, f"{line.get_label()} squashed into {(high - low) / width:.1%}"


LONG = "gpt2_1.5b_{}_micro4_seq1024_activation_checkpointing_full_sdpa_bf16_run{}"


@pytest.mark.parametrize("count", [3, 6, 30])
def test_every_text_of_every_plot_fits_the_figure(count: int, tmp_path: Path, drawn):
    study = [CPU / f"{name}.log" for name in (*STUDY, *FAILED)]
    logs = list(dict.fromkeys([*study, *sorted(CPU.glob("*.log")), *sorted(REAL.glob("*.log"))]))
    for index, log in enumerate(logs[:count]):
        name = LONG.format(log.stem, index) if index % 2 else log.stem
        make_run_dir(tmp_path / "logs", name, log, state="completed" if index % 3 else None)
    written, _ = _write(tmp_path / "logs", tmp_path / "out")
    assert written
    for path in written:
        assert_texts_fit(drawn[path.name], f"{count} runs: {path.name}")


def test_short_names_few_runs_fit_too(tmp_path: Path, drawn):
    for name in STUDY:
        make_run_dir(tmp_path / "logs", name, name)
    written, _ = _write(tmp_path / "logs", tmp_path / "out")
    assert len(written) == 5
    for path in written:
        assert_texts_fit(drawn[path.name], path.name)
