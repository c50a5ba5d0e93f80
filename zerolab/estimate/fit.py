"""Which ZeRO setups and micro batches fit a GPU: the recipe re-estimated with each
`zero=` building block and each micro batch (the recipe's checks included), against the
GPU's memory less the CUDA context, with room for the allocator's reserve."""

from __future__ import annotations

from dataclasses import dataclass, field

from zerolab.errors import UserError
from zerolab.estimate import estimate
from zerolab.estimate.buffers import ALLOCATOR_HEADROOM, CUDA_CONTEXT_GIB
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.render import stage_bound
from zerolab.recipe.schema import Recipe
from zerolab.recipe.setups import ZERO_SETUPS, zero_setup, zero_variant

MICRO_BATCHES = (1, 2, 4, 8, 16, 32)

FITS, TIGHT, DOES_NOT_FIT, INVALID = "fits", "tight", "does not fit", "not a valid setup"


def fit_status(peak_gib: float, gpu_memory_gib: float) -> str:
    """`fits` with the allocator's reserve and the CUDA context; `tight` when only the peak itself
    and the context fit; else `does not fit`."""
    if peak_gib * (1 + ALLOCATOR_HEADROOM) + CUDA_CONTEXT_GIB <= gpu_memory_gib:
        return FITS
    if peak_gib + CUDA_CONTEXT_GIB <= gpu_memory_gib:
        return TIGHT
    return DOES_NOT_FIT


@dataclass(frozen=True)
class Cell:
    """One setup at one micro batch: its predicted peak (GiB) and status, or why it is invalid."""

    status: str
    peak_gib: float | None = None
    reason: str | None = None


@dataclass
class FitTable:
    """Setups x micro batches for one GPU size."""

    gpu_memory_gib: float
    current: tuple[str, int]
    global_batch: int
    cells: dict[tuple[str, int], Cell] = field(default_factory=dict)
    global_batches: dict[int, int] = field(default_factory=dict)
    """The global batch each micro batch is estimated with (fit_global_batch)."""

    def micro_label(self, micro: int) -> str:
        """A micro batch's heading: the number, and the global batch it is estimated with where
        that is not the recipe's."""
        global_batch = self.global_batches[micro]
        return str(micro) if global_batch == self.global_batch else f"{micro}\n(global {global_batch})"


def fit_global_batch(recipe: Recipe, micro: int) -> int:
    """The recipe's global batch when micro x data-parallel size divides it, else the nearest
    multiple of that (micro 32 on 2 ranks makes a global batch of 32 into 64)."""
    per_step = micro * recipe.data_parallel_size
    return max(1, (recipe.train.global_batch_size + per_step // 2) // per_step) * per_step


def current_setup(recipe: Recipe) -> str:
    """The name of the recipe's ZeRO setup (recipe.setups): a fit table row when it is a
    configs/zero/ block."""
    zero = recipe.zero
    return zero_setup(zero.stage, zero.offload_optimizer, zero.offload_param, **zero_variant(zero))


def variant(recipe: Recipe, setup: str, micro: int) -> Recipe:
    """The recipe with another zero block and micro batch; the global batch is kept when the micro
    batch x data-parallel size divides it, else it becomes the nearest multiple. UserError when the
    recipe's checks refuse the combination."""
    if recipe.path is None:
        raise UserError("a recipe built in code has no file to re-read")
    global_batch = fit_global_batch(recipe, micro)
    overrides = [
        *recipe.overrides,
        f"zero={setup}",
        f"train.micro_batch_size={micro}",
        "train.gradient_accumulation_steps=null",
        f"train.global_batch_size={global_batch}",
    ]
    if not setup.startswith("z3"):  # the recipe's stage-3 knobs mean nothing at stages 0-2
        overrides += [f"zero.{key}=null" for key in stage_bound(3) if getattr(recipe.zero, key) is not None]
    return load_recipe(recipe.path, overrides)


def fit_table(recipe: Recipe, gpu_memory_gib: float) -> FitTable:
    """Every setup at every micro batch, against `gpu_memory_gib`."""

    table = FitTable(
        gpu_memory_gib,
        (current_setup(recipe), recipe.train.micro_batch_size),
        recipe.train.global_batch_size,
        global_batches={micro: fit_global_batch(recipe, micro) for micro in MICRO_BATCHES},
    )
    for setup, _ in ZERO_SETUPS:
        for micro in MICRO_BATCHES:
            try:
                peak = estimate(variant(recipe, setup, micro)).gpu_peak_gib
            except UserError as error:
                table.cells[setup, micro] = Cell(INVALID, reason=_first_problem(str(error)))
                continue
            table.cells[setup, micro] = Cell(fit_status(peak, gpu_memory_gib), peak)
    return table


def _first_problem(message: str) -> str:
    """The first `- problem` line of a recipe error, or the message itself."""
    for line in message.splitlines():
        if line.startswith("- "):
            return line[2:]
    return message.splitlines()[0]
