"""`zerolab launch RECIPE`: check the recipe and its inputs, create the run directory with
everything docs/run-directory.md lists, run the training and record how it ended."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab import __version__, rundir
from zerolab.contracts import EXPORTED_MODEL_DIR
from zerolab.engine.cuda import query_gpus
from zerolab.engine.doctor import collect
from zerolab.engine.paths import engine_bin_dir, engine_missing
from zerolab.errors import UserError
from zerolab.estimate.gpu import warn_before_launch
from zerolab.export.run import export_run
from zerolab.launch.execute import execute
from zerolab.locations import LOGS_DIR, display_path
from zerolab.recipe import render, run_facts
from zerolab.recipe.compose import RecipeProblems
from zerolab.recipe.extras import check_extras
from zerolab.recipe.inputs import check_inputs, refuse_missing_inputs
from zerolab.recipe.output import resolved_yaml
from zerolab.recipe.render import Resume
from zerolab.recipe.schema import DEFAULT_MASTER_PORT, Recipe
from zerolab.recipe.selection import select


@dataclass(frozen=True)
class Prepared:
    """A checked recipe, ready to run, and the earlier run it continues (if any)."""

    recipe: Recipe
    resume: Resume | None = None

    @property
    def name(self) -> str:
        """The run's name: the recipe's, or the resumed run's."""
        return self.recipe.name


def prepare(
    words: list[str], *, resume: Path | None = None, name: str | None = None, engine_required: bool = True
) -> Prepared:
    """Load and check a recipe (RECIPE then KEY=VALUE words), or the resolved recipe of the run
    being resumed with the words as overrides; every problem is a UserError before anything is
    written. `name` names the run instead of the recipe file (a sweep's cell). Without
    `engine_required` (a dry run), a missing engine is no problem and extras it would judge are
    left unjudged, with a warning; every other check of a launch applies (a GPU here, the port, the
    inputs, the training's length from its data). Warns when the memory estimate exceeds the visible
    GPU's memory."""

    try:
        recipe, resumption = select(words, resume, name=name)
    except RecipeProblems as refused:  # named together with what else keeps it from launching here
        more = machine_problems(refused.recipe, engine_required=engine_required)
        raise refused.adding([*more, *check_inputs(refused.recipe)]) from None
    machine = machine_problems(recipe, engine_required=engine_required)
    if machine:
        problems = [*machine, *check_inputs(recipe)]
        listed = "\n".join(f"- {problem}" for problem in problems)
        raise UserError(
            f"cannot launch {recipe.name}: {len(problems)} problem(s) found before launch:\n{listed}"
        )
    refuse_missing_inputs(recipe, "launch")
    run_facts(recipe)  # what run.json records: the length of a training in epochs needs its data
    check_extras(recipe, render(recipe), required=engine_required)
    warn_before_launch(recipe)
    return Prepared(recipe, resumption)


def machine_problems(recipe: Recipe, *, engine_required: bool = True) -> list[str]:
    """What keeps `recipe` from launching on this machine (check_local_gpus, check_port_free, the
    engine not set up or without the recipe's launcher), each refusal's message, so that a launch
    names them all at once with its recipe's problems and missing inputs. Without `engine_required`
    (a dry run), a missing engine is none."""

    problems: list[str] = []
    for check in (check_local_gpus, check_port_free):
        try:
            check(recipe)
        except UserError as error:
            problems.append(str(error))
    missing = engine_missing()
    if missing and engine_required:
        problems.append(f"the engine is not set up: {missing}")
    launcher = recipe.hardware.launcher
    path = f"{engine_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"
    if not missing and shutil.which(launcher, path=path) is None:
        problems.append(
            f"`{launcher}` is not in the engine environment ({engine_bin_dir()}); run: make setup"
        )
    return problems


def check_local_gpus(recipe: Recipe) -> None:
    """Refuse to start a CUDA recipe's ranks on this machine when nvidia-smi sees no GPU here (they
    would die at their first CUDA call, or train nothing). Writing a SLURM job (render --slurm,
    sweep --slurm) and rendering are not launches here, and are never refused for it."""

    if recipe.hardware.device != "cuda" or query_gpus():
        return
    raise UserError(
        f"cannot launch {recipe.name} here: hardware.device is cuda ({recipe.hardware.nodes} node(s) x "
        f"{recipe.hardware.procs_per_node} GPUs), but nvidia-smi sees no GPU on this machine. Run it on a "
        "GPU machine, or as a SLURM job (zerolab render --slurm); to train on this machine's CPU, use a "
        "CPU recipe (zerolab launch cpu/tiny_z1) or hardware=cpu-2ranks precision=fp32 model=gpt2-tiny"
    )


def check_port_free(recipe: Recipe) -> None:
    """Refuse a one-node launch whose rendezvous port, set by the user, is already listened on here
    (another run: its ranks would fail to start theirs, after the launcher had started them). A
    port not set is taken free at launch (with_free_port)."""
    port = recipe.hardware.master_port
    if recipe.hardware.nodes != 1 or port is None:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
        try:
            probe.bind(("", port))
        except OSError as error:
            raise UserError(
                f"cannot launch {recipe.name}: hardware.master_port {port} is in use on this machine "
                f"({error.strerror}; another run?). Pass another port, e.g. hardware.master_port={port + 1}, "
                "hardware.master_port=null to take a free one, or wait for the other run to end"
            ) from None


def with_free_port(recipe: Recipe) -> Recipe:
    """The recipe as it launches: where it runs on one node and sets no hardware.master_port, a copy
    with a port free on this machine now, as torchrun --standalone takes one (several nodes need the
    port they agreed on: the one set, else the default)."""
    if recipe.hardware.nodes != 1 or recipe.hardware.master_port is not None:
        return recipe
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    ported = recipe.model_copy(deep=True)
    ported.hardware.master_port = port
    return ported


def launch(
    prepared: Prepared,
    *,
    logs_root: Path = LOGS_DIR,
    run_dir: Path | None = None,
    echo: Callable[[str], None] | None = None,
    doctor: dict[str, Any] | None = None,
) -> tuple[Path, rundir.Status]:
    """Create the run directory, write its files, run the training; returns (run dir, status).
    `doctor` is the doctor report to record (default: collected now; a sweep collects it once)."""

    check_port_free(prepared.recipe)  # free when checked; a sweep checked it before its first cell
    recipe = with_free_port(prepared.recipe)
    port = recipe.hardware.master_port or DEFAULT_MASTER_PORT
    facts = run_facts(recipe).model_copy(update={"master_port": port})
    say = echo or _print
    with rundir.made(logs_root, prepared.name, run_dir) as directory:
        rendered = render(recipe, run_dir=str(directory), resume=prepared.resume)
        env = rendered.process_env(dict(os.environ))
        launcher = shutil.which(rendered.argv[0], path=env["PATH"]) or rendered.argv[0]
        # the recipe as given: a port it leaves unset stays unset (a resume takes a free one again)
        rundir.write_recipe(directory, resolved_yaml(prepared.recipe))
        rendered.write_config(directory, os.environ)
        resuming = f" (resuming {display_path(prepared.resume.run_dir)})" if prepared.resume else ""
        note = f"{prepared.name}{resuming}, launched {rundir.now_iso()} by zerolab {__version__}"
        rundir.write_command(directory, rendered.script(Path.cwd(), note))
        rundir.write_doctor(directory, doctor if doctor is not None else collect(cached=True))
        rundir.write_facts(directory, facts)
        if rendered.request is not None and rendered.request.exported:
            export_model(Path(rendered.request.model), directory, say)
    say(
        f"zerolab: launching {prepared.name} ({facts.world_size} ranks, rendezvous port {port}) into "
        f"{display_path(directory)}\n"
    )
    started = time.monotonic()
    status = execute(directory, [launcher, *rendered.argv[1:]], env, Path.cwd(), echo=echo)
    seconds = time.monotonic() - started
    say(
        f"zerolab: {prepared.name} {status.state} in {seconds:.0f} s (exit code {status.exit_code})"
        f"{': ' + status.cause if status.cause else ''}; run directory {display_path(directory)}\n"
    )
    if status.last_lines:
        say("zerolab: the last lines before it:\n" + "".join(f"  {line}\n" for line in status.last_lines))
    return directory, status


def export_model(source: Path, directory: Path, say: Callable[[str], None]) -> None:
    """A fine-tuning's model given as a run directory: its last checkpoint exported into the new run
    directory's model/ before the ranks start (when that fails, the launch is refused and its run
    directory removed: rundir.made)."""
    out = directory / EXPORTED_MODEL_DIR
    say(f"zerolab: exporting the checkpoint of {display_path(source)} into {display_path(out)}\n")
    export_run(source, out)


def _print(text: str) -> None:
    print(text, end="", flush=True)
