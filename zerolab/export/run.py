"""`zerolab export`: a run directory's checkpoint into a Hugging Face GPT-2 directory. What can be
judged from the run directory is judged here, before the engine's Python starts; the weights are
read and written by rank/hf_gpt2.py in the engine's environment. The output folder appears whole
or not at all."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zerolab.contracts import rank_script
from zerolab.data_prep.tokenizer import GPT2_BPE
from zerolab.engine.paths import engine_missing
from zerolab.engine.scripts import run_engine_script
from zerolab.errors import UserError
from zerolab.files import folder_written_whole
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.inputs import tokenizer_file
from zerolab.rundir import (
    CHECKPOINTS_DIR,
    RECIPE_FILE,
    last_checkpoint,
    read_facts,
    saved_iterations,
    whole_recipe,
)

CONVERTER = rank_script("hf_gpt2")


@dataclass(frozen=True)
class Exported:
    """An export done: the output folder and the checkpoint it holds."""

    out: Path
    run_dir: Path
    iteration: int


def _iteration(run_dir: Path, asked: int | None) -> int:
    saved = saved_iterations(run_dir)
    if not saved:
        raise UserError(
            f"{run_dir / CHECKPOINTS_DIR}: no checkpoint; a run saves them when its recipe sets "
            "train.save_interval (or train.save_interval_epochs): zerolab launch RECIPE train.save_interval=N"
        )
    if asked is None:
        latest = last_checkpoint(run_dir)
        return latest if latest in saved else saved[-1]
    if asked not in saved:
        raise UserError(
            f"--iteration {asked}: {run_dir / CHECKPOINTS_DIR} holds checkpoints at iterations "
            f"{', '.join(map(str, saved))}; give one of those"
        )
    return asked


def _refuse_taken(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: already exists and is not an empty folder; give a new folder")
    refuse_file_in_out(out)


def refuse_file_in_out(out: Path) -> None:
    """UserError naming the file when a folder above `out` is a file: the output cannot be made there."""
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                shown = next(p for p in (out, *out.parents) if p.absolute() == parent)
                raise UserError(
                    f"--out {out}: {shown} is a file, not a folder, so nothing can be written under it; "
                    "give an --out whose folders are folders (or do not exist yet)"
                )
            return


def export_run(run_dir: Path, out: Path, iteration: int | None = None) -> Exported:
    """Export the checkpoint of `run_dir` at `iteration` (default: the last saved) into `out`."""
    facts, problems = read_facts(run_dir)
    recipe_file = whole_recipe(run_dir)
    if facts is None or not recipe_file.is_file():
        why = "; ".join(problems) or f"no {RECIPE_FILE}"
        raise UserError(f"{run_dir}: not a run directory written by zerolab launch ({why})")
    step = _iteration(run_dir, iteration)
    _refuse_taken(out)
    recipe = load_recipe(recipe_file)
    if recipe.data.tokenizer_type != GPT2_BPE:
        raise UserError(
            f"{run_dir}: trained with data.tokenizer_type {recipe.data.tokenizer_type} "
            f"({recipe.data.tokenizer_model}), not GPT-2's BPE: a Hugging Face GPT-2 folder carries GPT-2's "
            "tokenizer, which would give the model other ids than it learned; nothing is exported"
        )
    if recipe.zero.stage == 3 and recipe.parallel.tensor > 1:
        raise UserError(
            f"{run_dir}: a ZeRO-3 checkpoint at tensor parallel {recipe.parallel.tensor} is not exported: "
            "DeepSpeed's zero_to_fp32 puts together the pieces of one tensor-parallel rank only, and "
            "the weights would be wrong; train ZeRO-3 at parallel.tensor=1, or ZeRO 1 or 2 with "
            "tensor parallelism"
        )
    missing = engine_missing()
    if missing:
        raise UserError(f"zerolab export reads the checkpoint with the engine's torch: {missing}")
    request = {
        "checkpoints": str(run_dir / CHECKPOINTS_DIR),
        "iteration": step,
        "tensor_parallel": recipe.parallel.tensor,
        "pipeline_parallel": recipe.parallel.pipeline,
        "zero_stage": recipe.zero.stage,
        "engine": recipe.engine,
        "vocab_size": recipe.model.vocab_size,
        "vocab_file": tokenizer_file(recipe, "vocab_file"),
        "merge_file": tokenizer_file(recipe, "merge_file"),
        "provenance": {
            "run": facts.name,
            "run_dir": str(run_dir.resolve()),
            "iteration": step,
            "model": facts.model,
            "zero_stage": recipe.zero.stage,
            "tensor_parallel": recipe.parallel.tensor,
            "pipeline_parallel": recipe.parallel.pipeline,
            "precision": facts.precision,
        },
    }
    with folder_written_whole(out) as partial:
        request["out"] = str(partial)
        try:
            # the checkpoint pickles some of Megatron's own classes: the engine's checkout is on the path
            run_engine_script(CONVERTER, request, partial, name="export", engine_path=True)
        except UserError as error:
            raise UserError(f"{run_dir}: cannot export the checkpoint at iteration {step}: {error}") from None
    return Exported(out, run_dir, step)
