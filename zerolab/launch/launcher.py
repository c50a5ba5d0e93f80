"""`zerolab launch RECIPE`: check the recipe and its inputs, create the run directory with
everything docs/run-directory.md lists, run the training and record how it ended."""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from zerolab import __version__
from zerolab.engine.paths import engine_bin_dir, engine_missing, torch_extensions_dir
from zerolab.engine.workarounds import ATTENTION_ENV
from zerolab.errors import UserError
from zerolab.launch import rundir
from zerolab.launch.checkpoints import resume_args
from zerolab.launch.execute import execute
from zerolab.launch.status import now_iso
from zerolab.locations import CHECKOUT, display_path

DEFAULT_LOGS = Path("logs")
"""Where run directories go, relative to the current directory (where runs start)."""


@dataclass(frozen=True)
class Prepared:
    """A checked recipe, ready to run: its name, the recipe and the previous run it resumes."""

    name: str
    recipe: object
    resumes: Path | None


def prepare(spec: str | None, overrides: list[str], *, resume: Path | None = None) -> Prepared:
    """Load and check a recipe (or the resolved recipe of the run being resumed, with
    `overrides` on top); every problem is a UserError before anything is written. Warns when the
    memory estimate exceeds the visible GPU's memory."""
    from zerolab.estimate.gpu import warn_before_launch
    from zerolab.recipe import check_inputs, load_recipe, render
    from zerolab.recipe.extras import check_extras

    if resume is not None:
        if not (resume / rundir.RECIPE_FILE).is_file():
            raise UserError(f"--resume {resume}: not a run directory (no {rundir.RECIPE_FILE})")
        name = rundir.read_json(resume / rundir.RUN_FILE)["name"]
        recipe = load_recipe(resume / rundir.RECIPE_FILE, overrides)
    elif spec is None:
        raise UserError(
            "give a RECIPE (a file, or a name under recipes/ such as cpu/tiny_z1) or --resume RUN_DIR"
        )
    else:
        recipe = load_recipe(spec, overrides)
        name = recipe.name
    problems = check_inputs(recipe)
    if problems:
        raise UserError(
            "cannot launch, inputs missing:\n" + "\n".join(f"- {problem}" for problem in problems)
        )
    missing = engine_missing()
    if missing:
        raise UserError(f"cannot launch: {missing}")
    check_extras(recipe, render(recipe), required=True)
    warn_before_launch(recipe)
    return Prepared(name=name, recipe=recipe, resumes=resume)


def launch(
    prepared: Prepared,
    *,
    logs_root: Path = DEFAULT_LOGS,
    run_dir: Path | None = None,
    echo: Callable[[str], None] | None = None,
) -> tuple[Path, dict]:
    """Create the run directory, write its files, run the training; returns (run dir, status)."""
    from zerolab.engine.doctor import collect
    from zerolab.recipe import load_recipe, render, run_facts
    from zerolab.recipe.output import resolved_yaml

    recipe = prepared.recipe
    rendered = render(recipe)
    env = {
        **{
            name: value for name, value in os.environ.items() if name != ATTENTION_ENV
        },  # model.attention decides
        "PATH": f"{engine_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        "TORCH_EXTENSIONS_DIR": str(torch_extensions_dir()),
        **this_zerolab(os.environ.get("PYTHONPATH")),
        **rendered.env,
    }
    launcher = shutil.which(rendered.argv[0], path=env["PATH"])
    if launcher is None:
        raise UserError(
            f"`{rendered.argv[0]}` is not in the engine environment ({engine_bin_dir()}); run: make setup"
        )

    directory = rundir.claim_run_dir(run_dir) if run_dir else rundir.new_run_dir(logs_root, prepared.name)
    ds_config_path = directory / rundir.DS_CONFIG_FILE
    rendered = render(recipe, str(directory))
    argv = [*rendered.with_ds_config_path(str(ds_config_path)).argv]
    facts = run_facts(recipe) | {"name": prepared.name}
    if prepared.resumes is not None:
        previous = render(load_recipe(prepared.resumes / rundir.RECIPE_FILE))
        argv += resume_args(prepared.resumes, previous.argv, argv)
        facts["recipe"] = rundir.read_json(prepared.resumes / rundir.RUN_FILE).get("recipe")
    final = replace(rendered, argv=argv)

    rundir.write_text(directory / rundir.RECIPE_FILE, resolved_yaml(recipe))
    rundir.write_json(ds_config_path, rendered.ds_config)
    rundir.write_text(directory / rundir.COMMAND_FILE, command_script(final.shell(), prepared), mode=0o755)
    rundir.write_json(directory / rundir.DOCTOR_FILE, collect(cached=True))
    rundir.write_json(directory / rundir.RUN_FILE, facts)

    say = echo or _print
    say(f"zerolab: launching {prepared.name} ({facts['world_size']} ranks) into {display_path(directory)}\n")
    started = time.monotonic()
    status = execute(directory, [launcher, *argv[1:]], env, Path.cwd(), echo=echo)
    seconds = time.monotonic() - started
    say(
        f"zerolab: {prepared.name} {status['state']} in {seconds:.0f} s (exit code {status['exit_code']})"
        f"{': ' + status['cause'] if status['cause'] else ''}; run directory {display_path(directory)}\n"
    )
    if status["last_lines"]:
        say("zerolab: the last lines before it:\n" + "".join(f"  {line}\n" for line in status["last_lines"]))
    return directory, status


def this_zerolab(pythonpath: str | None) -> dict[str, str]:
    """The environment under which every rank imports this zerolab whatever the directory it
    starts in holds: a checkout first on PYTHONPATH, and the current directory left off
    sys.path (PYTHONSAFEPATH, Python 3.11 and later). An installed zerolab is the engine
    environment's own."""
    if CHECKOUT is None:
        return {"PYTHONSAFEPATH": "1"}
    return {"PYTHONPATH": os.pathsep.join(filter(None, (str(CHECKOUT), pythonpath))), "PYTHONSAFEPATH": "1"}


def command_script(command: str, prepared: Prepared) -> str:
    """command.sh: the launch, re-runnable from anywhere (it changes to the directory it was
    launched from, which the recipe's relative paths are relative to)."""
    resumed = f" (resuming {prepared.resumes})" if prepared.resumes else ""
    imports = " ".join(f"{name}={shlex.quote(value)}" for name, value in this_zerolab(None).items())
    return (
        "#!/usr/bin/env bash\n"
        f"# {prepared.name}{resumed}, launched {now_iso()} by zerolab {__version__}.\n"
        "# Re-runs the same command; its --save (if any) writes into this run's checkpoints/.\n"
        "set -euo pipefail\n"
        f"cd {shlex.quote(str(Path.cwd()))}\n"
        f'export PATH="{engine_bin_dir()}:$PATH" PYTHONUNBUFFERED=1 {imports}\n'
        f'export TORCH_EXTENSIONS_DIR="{torch_extensions_dir()}"\n'
        f"{command}\n"
    )


def _print(text: str) -> None:
    print(text, end="", flush=True)
