"""What `render`, `show` and `launch --dry-run` print."""

from __future__ import annotations

import json
import shlex
import sys

from zerolab.contracts import REQUEST_FILE
from zerolab.errors import UserError
from zerolab.recipe.job import check_inputs, job_of, train_iters
from zerolab.recipe.render import RUN_DIR_PLACEHOLDER, Launch, as_text, shell_word
from zerolab.recipe.schema import DEFAULT_MASTER_PORT, Recipe
from zerolab.recipe.yaml_io import dump_yaml
from zerolab.rundir import RECIPE_END


def summary_line(recipe: Recipe) -> str:
    """One line: model, parallel layout, batch arithmetic, ZeRO, recompute, attention and precision."""
    job = job_of(recipe)
    return " | ".join(
        (
            job.what(),
            f"world {recipe.world_size} = {recipe.hardware.nodes} node(s) x {recipe.hardware.procs_per_node}",
            f"tensor {recipe.parallel.tensor} x pipeline {recipe.parallel.pipeline} "
            + (f"x sequence {recipe.parallel.sequence} " if recipe.parallel.sequence > 1 else "")
            + f"x data {recipe.data_parallel_size}",
            f"global batch {recipe.train.global_batch_size} = micro {recipe.train.micro_batch_size} "
            f"x grad-accum {recipe.gradient_accumulation_steps} x data {recipe.data_parallel_size}",
            zero_label(recipe),
            f"recompute {recompute_label(recipe)}",
            f"attention {job.attention_label()}",
            recipe.precision_name,
            recipe.hardware.device,
            _length_text(recipe),
        )
    )


def zero_label(recipe: Recipe) -> str:
    """`ZeRO 3 + CPU optimizer offload + CPU weight offload`, `ZeRO 3 + hpZ 8 + qwZ + qgZ`, `ZeRO 3 +
    MiCS 2`."""
    zero = recipe.zero
    offloads = [
        name
        for name, on in (("CPU optimizer", zero.offload_optimizer), ("CPU weight", zero.offload_param))
        if on
    ]
    parts = [f"ZeRO {zero.stage}", *(f"{name} offload" for name in offloads)]
    if zero.hpz_partition_size and zero.hpz_partition_size > 1:
        parts.append(f"hpZ {zero.hpz_partition_size}")
    parts += [name for name, on in (("qwZ", zero.quantized_weights), ("qgZ", zero.quantized_gradients)) if on]
    if zero.mics_shard_size:
        parts.append(
            f"MiCS {zero.mics_shard_size}" + (" hierarchical" if zero.mics_hierarchical_params_gather else "")
        )
    return " + ".join(parts)


def recompute_label(recipe: Recipe) -> str:
    """`none`, `selective`, or full recomputation as the job kind does it (`full uniform x1`)."""
    granularity = recipe.activation_checkpointing.granularity
    return job_of(recipe).full_recompute_label() if granularity == "full" else granularity


def commented(text: str) -> str:
    """Every line of `text` as a shell comment, so that pasted text never runs any of it."""
    return "".join(f"# {line}\n" for line in (text.splitlines() or [""]))


def description_lines(recipe: Recipe) -> list[str]:
    """The recipe file and its description, then the overrides applied on top of it, if any:
    the description is the file's, so it is marked as such once something overrides it."""
    if not recipe.overrides:
        return [f"{recipe.path}: {recipe.description}"]
    return [
        f"{recipe.path} (its description: {recipe.description})",
        f"overridden: {shlex.join(recipe.overrides)} (runs as {recipe.name})",
    ]


CONFIG_END = "ZEROLAB_DS_CONFIG"
"""The here-document delimiter around the DeepSpeed config in the render text (quoted: nothing in
the config is expanded; no line of indented JSON can equal it)."""
REQUEST_END = "ZEROLAB_REQUEST"
"""The delimiter around a fine-tuning's request.json, likewise."""


def render_text(recipe: Recipe, launch: Launch) -> str:
    """The dry-run text, a script to paste: comment lines, then one command list that writes the
    DeepSpeed config into the run directory (a quoted here-document) and, only if that worked,
    starts the launch (what command.sh holds after its preamble). Text from the recipe appears
    only in comments, quoted words and the inert here-document."""
    config = shell_word(launch.ds_config_path)
    if launch.run_dir == RUN_DIR_PLACEHOLDER:
        where = (
            "RUN_DIR: the run directory (zerolab launch creates logs/NAME/TIMESTAMP). To run this by hand, "
            "set RUN_DIR to a new directory, put the engine's bin directory first on PATH and this checkout "
            "first on PYTHONPATH (command.sh does) and paste this in this directory: it writes the "
            "DeepSpeed config into RUN_DIR, then launches."
        )
        guard = ': "${RUN_DIR:?set RUN_DIR to the run directory first}" && '
    else:
        where = (
            f"Writes the DeepSpeed config into {as_text(launch.run_dir)}, then launches, from this directory "
            "with the engine's bin directory first on PATH and this checkout first on PYTHONPATH "
            "(command.sh does)."
        )
        guard = ""
    header = "".join(
        commented(line)
        for line in [*description_lines(recipe), summary_line(recipe), where, *port_note(recipe)]
    )
    request = ""
    if launch.request is not None:
        request_path = shell_word(f"{launch.run_dir}/{REQUEST_FILE}")
        request = (
            f"cat > {request_path} <<'{REQUEST_END}' &&\n"
            f"{json.dumps(launch.request.as_json(), indent=2)}\n{REQUEST_END}\n"
        )
    return (
        f"{header}{guard}mkdir -p {shell_word(launch.run_dir)} && cat > {config} <<'{CONFIG_END}' &&\n"
        f"{json.dumps(launch.ds_config, indent=2)}\n{CONFIG_END}\n{request}"
        f"{launch.steps_before()}{launch.shell()}\n"
    )


def port_note(recipe: Recipe) -> list[str]:
    """Where the rendezvous port printed is not the one a launch uses: one node, hardware.master_port
    not set (the local backend takes a free one: zerolab.backends.local)."""
    hw = recipe.hardware
    if hw.nodes != 1 or hw.master_port is not None:
        return []
    return [
        "hardware.master_port is not set: zerolab launch takes a free port in place of "
        f"{DEFAULT_MASTER_PORT} (as torchrun --standalone does) and records it in command.sh and run.json; "
        "set it to keep one."
    ]


def read_render_text(text: str) -> tuple[dict, str]:
    """The DeepSpeed config and the launch command (its shell text) of a render_text()."""
    _, _, rest = text.partition(f"<<'{CONFIG_END}' &&\n")
    config, _, command = rest.partition(f"\n{CONFIG_END}\n")
    if command.startswith("cat > "):  # a fine-tuning's request.json comes next
        command = command.partition(f"\n{REQUEST_END}\n")[2]
    return json.loads(config), command.removesuffix("\n")


def resolved_yaml(recipe: Recipe, *, derived: bool = True) -> str:
    """The fully resolved recipe as YAML, headed by the values derived from it (as comments);
    without `derived` (a recipe that fails its checks, whose sizes may not divide) a note instead.
    Its last line is rundir.RECIPE_END, by which a run's recipe.yaml cut short is told (whole_recipe)."""
    overridden = f"overridden: {shlex.join(recipe.overrides)}" if recipe.overrides else ""
    values = (
        f"# derived: world_size={recipe.world_size} data_parallel={recipe.data_parallel_size} "
        f"gradient_accumulation_steps={recipe.gradient_accumulation_steps} "
        f"padded_vocab_size={recipe.padded_vocab_size} train_iters={_iters_or_reason(recipe)}\n"
        if derived
        else "# derived: not computed, the recipe fails its checks (the problems are on stderr)\n"
    )
    header = (
        commented(f"{recipe.path}, fully resolved") + (commented(overridden) if overridden else "") + values
    )
    return f"{header}{dump_yaml(recipe.model_dump(mode='json'))}{RECIPE_END}\n"


def warn_missing_inputs(recipe: Recipe) -> None:
    """Missing data, tokenizer or host files as warnings on stderr (a dry run still prints)."""
    for problem in check_inputs(recipe):
        print(f"zerolab: warning: {problem}", file=sys.stderr)


UNKNOWN_LENGTH = "unknown until the data is prepared (launch counts them from it)"


def _iters_or_reason(recipe: Recipe) -> str:
    try:
        return str(train_iters(recipe))
    except UserError:
        return UNKNOWN_LENGTH


def _length_text(recipe: Recipe) -> str:
    iters = _iters_or_reason(recipe)
    return f"iterations {iters}" if iters == UNKNOWN_LENGTH else f"{iters} iterations"
