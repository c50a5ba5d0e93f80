"""The local backend: the recipe's launcher (torchrun or deepspeed) started on this machine, into a
run directory made here with everything docs/run-directory.md lists; each node of a several-node
torchrun launch runs its own command (hardware.node_rank)."""

from __future__ import annotations

import os
import random
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zerolab import __version__, rundir
from zerolab.backends.base import LaunchPlan, print_now
from zerolab.backends.execute import Execution, finish, start
from zerolab.contracts import EXPORTED_MODEL_DIR, FinetuneRequest
from zerolab.engine.cuda import query_gpus
from zerolab.engine.doctor import collect
from zerolab.engine.paths import engine_bin_dir, engine_missing
from zerolab.engine.scripts import script_failure
from zerolab.errors import UserError
from zerolab.export.run import export_run
from zerolab.locations import display_path
from zerolab.recipe.output import render_text, resolved_yaml
from zerolab.recipe.render import Launch, render
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import Recipe


@dataclass(frozen=True)
class LocalBackend:
    """The launcher on this machine (hardware.backend local)."""

    name: str = "local"
    doctor: dict | None = None
    """The doctor report to record (default: collected at each launch; a sweep collects it once)."""

    def problems(self, recipe: Recipe, *, engine_required: bool = True) -> list[str]:
        """What keeps `recipe` from launching on this machine (check_local_gpus, check_port_free, the
        engine not set up or without the recipe's launcher). Without `engine_required` (a dry run),
        a missing engine is none."""
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

    def launched(self, recipe: Recipe) -> Recipe:
        """The recipe with a free rendezvous port where it needs one (with_free_port)."""
        return with_free_port(recipe)

    def run_dir(self, name: str, *, logs_root: Path, given: Path | None) -> Path | None:
        """`given` (--run-dir), else a new logs_root/NAME/TIMESTAMP."""
        return given if given is not None else rundir.new_path(logs_root / name)

    def render(self, recipe: Recipe, *, run_dir: str, resume: Resume | None) -> Launch:
        """Placed as the recipe's hardware section says."""
        return render(recipe, run_dir=run_dir, resume=resume)

    def job(self, plan: LaunchPlan) -> str:
        """The script to paste (zerolab.recipe.output.render_text)."""
        return render_text(plan.recipe, plan.launch)

    def write(self, plan: LaunchPlan, *, echo: Callable[[str], None] = print_now) -> LocalJob:
        """Make the run directory at the plan's path with every file docs/run-directory.md lists,
        and run the steps before the ranks (an export, a checkpoint's conversion); a failure
        removes it (rundir.made)."""
        assert plan.run_dir is not None, "a local plan decides its run directory"
        check_port_free(plan.recipe)  # free when planned; a sweep planned it before its first cell
        rendered, facts = plan.launch, plan.facts
        with rundir.made(plan.run_dir) as directory:
            env = rendered.process_env(dict(os.environ))
            launcher = shutil.which(rendered.argv[0], path=env["PATH"]) or rendered.argv[0]
            rundir.write_recipe(directory, resolved_yaml(plan.recipe))
            rendered.write_config(directory, os.environ)
            resuming = f" (resuming {display_path(plan.resume.run_dir)})" if plan.resume else ""
            note = f"{plan.name}{resuming}, launched {rundir.now_iso()} by zerolab {__version__}"
            rundir.write_command(directory, rendered.script(Path.cwd(), note))
            rundir.write_doctor(directory, self.doctor if self.doctor is not None else collect(cached=True))
            rundir.write_facts(directory, facts)
            if isinstance(rendered.request, FinetuneRequest) and rendered.request.exported:
                export_model(Path(rendered.request.model), directory, echo)
            for step in rendered.before:
                run_step(step, env, echo)
        return LocalJob(plan, directory, [launcher, *rendered.argv[1:]], env)

    def submit(self, job: LocalJob, *, echo: Callable[[str], None] = print_now) -> LocalRun:
        """Start the launcher in the run directory."""
        facts = job.plan.facts
        echo(
            f"zerolab: launching {job.plan.name} ({facts.world_size} ranks, rendezvous port "
            f"{facts.master_port}) into {display_path(job.directory)}\n"
        )
        began = time.monotonic()
        return LocalRun(job, start(job.directory, job.argv, job.env, Path.cwd(), echo=echo), began)

    def follow(self, run: LocalRun, *, echo: Callable[[str], None] = print_now) -> tuple[Path, rundir.Status]:
        """Wait for the launcher's end; the run directory and its final status."""
        status = finish(run.execution)
        seconds = time.monotonic() - run.began
        directory = run.job.directory
        echo(
            f"zerolab: {run.job.plan.name} {status.state} in {seconds:.0f} s (exit code {status.exit_code})"
            f"{': ' + status.cause if status.cause else ''}; run directory {display_path(directory)}\n"
        )
        if status.last_lines:
            echo(
                "zerolab: the last lines before it:\n" + "".join(f"  {line}\n" for line in status.last_lines)
            )
        return directory, status

    def cancel(self, run: LocalRun, number: int) -> None:
        """Stop every rank (SIGTERM, SIGKILL after a grace period; at once when asked twice)."""
        run.execution.stop(number)


@dataclass(frozen=True)
class LocalJob:
    """A local launch written: its run directory, and the command and environment that start it."""

    plan: LaunchPlan
    directory: Path
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class LocalRun:
    """A local launch started."""

    job: LocalJob
    execution: Execution
    began: float
    """time.monotonic() at its start."""


def check_local_gpus(recipe: Recipe) -> None:
    """Refuse to start a CUDA recipe's ranks on this machine when nvidia-smi sees no GPU here (they
    would die at their first CUDA call, or train nothing). Writing a SLURM job and rendering are not
    launches here, and are never refused for it."""

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
    port not set is taken free when the launch is planned (with_free_port)."""
    port = recipe.hardware.master_port
    if recipe.hardware.nodes != 1 or port is None:
        return
    why = port_taken(port)
    if why is not None:
        raise UserError(
            f"cannot launch {recipe.name}: hardware.master_port {port} is in use on this machine "
            f"({why}; another run?). Pass another port, e.g. hardware.master_port={port + 1}, "
            "hardware.master_port=null to take a free one, or wait for the other run to end"
        )


def port_taken(port: int) -> str | None:
    """Why `port` cannot be listened on here now (the system's reason), or None when it can (a port
    in TIME_WAIT can: the launcher's store reuses it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as error:
            return error.strerror or str(error)
    return None


FREE_PORTS = range(10000, 20000)
"""Where a one-node launch takes its rendezvous port: below the ports the kernel gives outgoing
connections (Linux 32768-60999, macOS 49152-65535) and a SLURM job's 20000-31999. A port the kernel
gives out (what binding port 0 returns) can be taken by another run's connection between the choice
and the launcher's listen, and the launch then fails with EADDRINUSE."""

EPHEMERAL_PORTS_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> range:
    """The ports this machine's kernel gives outgoing connections (Linux's default where it does
    not say)."""
    try:
        low, high = (int(word) for word in EPHEMERAL_PORTS_FILE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port() -> int:
    """A TCP port nothing listens on here now: one of FREE_PORTS outside the kernel's ephemeral
    range, at random; where that range covers them all, one the kernel gives (binding port 0)."""
    ephemeral = ephemeral_ports()
    candidates = [port for port in FREE_PORTS if port not in ephemeral]
    for port in random.sample(candidates, min(len(candidates), 100)):
        if port_taken(port) is None:
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def with_free_port(recipe: Recipe) -> Recipe:
    """The recipe as it launches: where it runs on one node and sets no hardware.master_port, a copy
    with a port free on this machine now (free_port), as torchrun --standalone takes one (several
    nodes need the port they agreed on: the one set, else the default)."""
    if recipe.hardware.nodes != 1 or recipe.hardware.master_port is not None:
        return recipe
    ported = recipe.model_copy(deep=True)
    ported.hardware.master_port = free_port()
    return ported


def run_step(step: tuple[str, ...], env: dict[str, str], say: Callable[[str], None]) -> None:
    """One of the launch's steps before the ranks start (a checkpoint's conversion), in the engine's
    environment, its output shown; when it fails, the launch is refused with the reason it gave (its
    `zerolab launch: ...` line) and the run directory removed (rundir.made)."""
    say(f"zerolab: {shlex.join(step)}\n")
    done = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
    say("".join(f"  {line}\n" for line in done.stdout.splitlines() if line.startswith("zerolab")))
    if done.returncode != 0:
        why = script_failure(done.stderr, "launch") or f"exit status {done.returncode}"
        raise UserError(f"{shlex.join(step)} failed: {why}")


def export_model(source: Path, directory: Path, say: Callable[[str], None]) -> None:
    """A fine-tuning's model given as a run directory: its last checkpoint exported into the new run
    directory's model/ before the ranks start (when that fails, the launch is refused and its run
    directory removed: rundir.made)."""
    out = directory / EXPORTED_MODEL_DIR
    say(f"zerolab: exporting the checkpoint of {display_path(source)} into {display_path(out)}\n")
    export_run(source, out)
