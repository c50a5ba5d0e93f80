"""The fit table as a PNG (matplotlib, Agg): one square per ZeRO setup and micro batch,
coloured by whether it fits, with the predicted peak written in it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from zerolab.estimate.buffers import ALLOCATOR_HEADROOM, CUDA_CONTEXT_GIB
from zerolab.estimate.fit import DOES_NOT_FIT, FITS, INVALID, MICRO_BATCHES, TIGHT, FitTable
from zerolab.files import save_png
from zerolab.recipe.output import recompute_label
from zerolab.recipe.schema import Recipe
from zerolab.recipe.setups import ZERO_SETUPS

COLORS = {FITS: "#4daf4a", TIGHT: "#ffbf00", DOES_NOT_FIT: "#e41a1c", INVALID: "#d9d9d9"}
LABELS = {
    FITS: f"fits (with +{ALLOCATOR_HEADROOM:.0%} allocator reserve and {CUDA_CONTEXT_GIB} GiB CUDA context)",
    TIGHT: "tight (fits only without the allocator reserve)",
    DOES_NOT_FIT: "does not fit",
    INVALID: "not a valid setup for this recipe",
}


def write_fit_plot(fit: FitTable, recipe: Recipe, path: Path) -> None:
    """Write the fit table of `recipe` to `path` (PNG), whole or not at all."""
    # matplotlib here, not at the top: heavy (0.6 s), loaded only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    fig, ax = plt.subplots(figsize=(9.0, 5.6))
    for row, (setup, _) in enumerate(ZERO_SETUPS):
        for column, micro in enumerate(MICRO_BATCHES):
            cell = fit.cells[setup, micro]
            current = (setup, micro) == fit.current
            ax.add_patch(
                Rectangle(
                    (column, row),
                    0.96,
                    0.92,
                    facecolor=COLORS[cell.status],
                    edgecolor="black" if current else "white",
                    linewidth=2.5 if current else 0.5,
                )
            )
            text = "n/a" if cell.peak_gib is None else f"{cell.peak_gib:.1f}"
            ax.text(
                column + 0.48,
                row + 0.46,
                text,
                ha="center",
                va="center",
                fontsize=10,
                fontweight="bold" if current else "normal",
            )
    ax.set_xlim(-0.05, len(MICRO_BATCHES))
    ax.set_ylim(len(ZERO_SETUPS), -0.1)
    ax.set_xticks([i + 0.48 for i in range(len(MICRO_BATCHES))], [fit.micro_label(m) for m in MICRO_BATCHES])
    ax.set_yticks([i + 0.46 for i in range(len(ZERO_SETUPS))], [label for _, label in ZERO_SETUPS])
    ax.set_xlabel(
        f"micro batch (sequences per GPU per forward pass); global batch {fit.global_batch} unless marked"
    )
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    model, parallel = recipe.model, recipe.parallel
    ax.set_title(
        f"Does it fit in {fit.gpu_memory_gib:g} GiB per GPU? Predicted peak allocated per GPU (GiB)\n"
        f"{model.name} on {recipe.world_size} GPU(s) (data {recipe.data_parallel_size} x "
        f"tensor {parallel.tensor} x pipeline {parallel.pipeline}), seq {model.seq_length}, "
        f"{recipe.precision_name}, recompute {recompute_label(recipe)}",
        fontsize=10,
    )
    handles = [Patch(facecolor=COLORS[status], label=LABELS[status]) for status in COLORS]
    handles.append(
        Patch(facecolor="white", edgecolor="black", linewidth=2, label=f"this recipe ({recipe.name})")
    )
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
        fontsize=8.5,
        frameon=False,
    )
    reasons = sorted({cell.reason for cell in fit.cells.values() if cell.reason})
    if reasons:
        note = "\n".join(textwrap.shorten(f"n/a: {reason}", 150) for reason in reasons[:2])
        fig.text(0.5, 0.01, note, ha="center", va="bottom", fontsize=8, color="#555555")
    fig.tight_layout(rect=(0, 0.06 if reasons else 0, 1, 1))
    save_png(fig, path, dpi=130)
    plt.close(fig)
