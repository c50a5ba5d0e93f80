"""A recipe's job kind: pretraining (zerolab.recipe.pretraining: Megatron's pretrain_gpt.py),
pretraining on the second engine (zerolab.recipe.fsdp2: zerolab's FSDP2 loop, `engine: fsdp2`) or
fine-tuning (zerolab.recipe.finetuning: zerolab's loop on a GLUE task), chosen by the recipe's
`finetune` section, then its `engine`. All share the common sections (zero, precision, hardware,
logging, train's batches and rate); each kind owns what differs, and the core (render, checks, inputs, length,
output, estimate) asks the kind rather than the section."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from zerolab.contracts import FinetuneRequest, Fsdp2Request
from zerolab.errors import UserError
from zerolab.recipe.finetuning import FineTuning
from zerolab.recipe.fsdp2 import Fsdp2Training
from zerolab.recipe.pretraining import Pretraining
from zerolab.recipe.provenance import Sources
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import NODE_PLACING_BACKENDS, Recipe


class Job(Protocol):
    """What a job kind answers for its recipe."""

    recipe: Recipe
    entry_module: str
    """The module every rank runs (the launcher's `-m` / `--module`)."""
    reads_ds_config: bool
    """Whether the module reads the run directory's ds_config.json (the render writes {} otherwise)."""
    engine_judges_extras: bool
    """Whether the engine judges extra.megatron_args and extra.ds_config before launch."""
    loads_model_whole: bool
    """Whether every rank holds the whole model in host memory (fp32) while it loads."""
    refuses_what_does_not_fit: bool
    """Whether a launch the memory estimate says does not fit its GPUs is refused, not warned of."""

    def program_args(
        self, run_dir: str, *, engine: str | None, resume: Resume | None, load_own_checkpoints: bool
    ) -> list[str]:
        """The module's arguments, for a run writing into `run_dir` (render's)."""
        ...

    def request(self, *, engine: str | None, resume: Resume | None) -> FinetuneRequest | Fsdp2Request | None:
        """The request file written beside the ds_config, if the module reads one."""
        ...

    def steps_before(self, *, engine: str | None, resume: Resume | None) -> tuple[tuple[str, ...], ...]:
        """The commands run once before the ranks start (render's Launch.before)."""
        ...

    def env(self) -> dict[str, str]:
        """The kind's own environment for every rank, after the common one."""
        ...

    def ds_config(self) -> dict[str, Any]:
        """The kind's own ds_config keys, after the common ones."""
        ...

    def adopt_model(self, sources: Sources) -> None:
        """Complete the recipe's model section from the model it starts from, once composed."""
        ...

    def input_problems(self) -> list[str]:
        """One message per missing or mismatched input file, naming the key and the fix."""
        ...

    def input_paths(self) -> list[str]:
        """The files and folders read that a recipe may give as absolute paths."""
        ...

    def run_exported_at_start(self) -> str | None:
        """The run directory whose model the launch exports before the ranks start, if any."""
        ...

    def train_iters(self) -> int:
        """The optimizer steps trained (UserError when they need data not at hand)."""
        ...

    def epoch_tokens(self) -> int:
        """Tokens of one epoch (UserError when they need data not at hand)."""
        ...

    def what(self) -> str:
        """What the render's summary line says is trained."""
        ...

    def attention_label(self) -> str:
        """model.attention as the program names it."""
        ...

    def full_recompute_label(self) -> str:
        """activation_checkpointing full, as the program does it."""
        ...

    def run_facts(self) -> dict[str, Any]:
        """run.json's facts that only this kind has."""
        ...


def job_of(recipe: Recipe) -> Job:
    """The recipe's job kind: fine-tuning when it has a `finetune` section, else pretraining on the
    recipe's `engine`."""
    if recipe.finetune is not None:
        return FineTuning(recipe, recipe.finetune)
    return Fsdp2Training(recipe) if recipe.engine == "fsdp2" else Pretraining(recipe)


def train_iters(recipe: Recipe) -> int:
    """The number of optimizer steps the recipe trains for, as its job kind counts them."""
    return job_of(recipe).train_iters()


def refuse_missing_inputs(recipe: Recipe, action: str) -> None:
    """UserError (`cannot ACTION, ...`) listing every problem of `check_inputs`, if any."""
    problems = check_inputs(recipe)
    if problems:
        raise UserError(
            f"cannot {action}, inputs missing or not the recipe's:\n"
            + "\n".join(f"- {problem}" for problem in problems)
        )


def check_inputs(recipe: Recipe) -> list[str]:
    """One message per missing (or damaged) input file of the recipe's job kind, then the hostfile,
    each naming the key and how to make the file. Where hardware.backend places the nodes itself (a
    SLURM job), the job writes the hostfile."""
    problems = job_of(recipe).input_problems()
    hostfile = recipe.hardware.hostfile
    placed = recipe.hardware.backend in NODE_PLACING_BACKENDS
    if hostfile is not None and not placed and not Path(hostfile).is_file():
        problems.append(
            f"hardware.hostfile: {hostfile} not found; write it with one `hostname slots=N` line per node "
            "(N = hardware.procs_per_node), or let SLURM write it (hardware.backend=slurm)"
        )
    return problems
