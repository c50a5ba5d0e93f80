"""The GPU check's steps, in order, each one command (or a few) with its log: a virtual environment
over the machine's own Python and CUDA torch, filled from the kit; `zerolab engine install`
(apex, the fused kernels and the data helpers built for the GPU here); `zerolab doctor`; the
bundled dolly sample prepared; the five seed recipes on one GPU (one sweep over the zero block,
which is all they differ in); benchmarks/gpu_vs_peer.py; the five GPT-2 XL fine-tuning recipes
(a random-weight GPT-2 XL on the shipped WNLI sample); then the report (zerolab.gpucheck.report).

A step that completed is recorded in logs/gpu-check/steps/ and skipped when the check runs again,
so that a check cut short by a time limit goes on where it stopped. Standard library only: the
machine's Python runs the first step before zerolab's dependencies are installed.
"""

from __future__ import annotations

import json
import os
import shlex
import site
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from zerolab.engine.cuda import query_gpus
from zerolab.engine.pins import load_pins
from zerolab.errors import UserError
from zerolab.gpucheck.kit import NOT_NEEDED, Kit
from zerolab.locations import LOGS_DIR, REPO_ROOT, SAMPLES_DIR

WORK = LOGS_DIR / "gpu-check"
"""Where the check keeps its state, logs, data and runs (relative to the repository root)."""
SWEEP_NAME = "gpu-check"
SEED_RECIPE = "gpt2_dp"
SEED_SETUPS = "zero=z0,z1,z2,z3,z3_offload"
"""recipes/gpt2_{dp,z1,z2,z3,z3_offload}.yaml differ only in their zero block: one sweep of
gpt2_dp over it launches exactly the five seed recipes."""
SAMPLE = SAMPLES_DIR / "dolly151.jsonl"
LINKS = "zerolab-gpu-check.pth"
"""The .pth file that marks the check's environment and links zerolab and the machine's packages."""
MIN_ITERS = 20
"""The fewest iterations a run of the check may have: past the seed recipes' learning-rate warm-up
(train.lr_warmup_iters of configs/train/gpt2-seed.yaml, which zerolab refuses to outlast), with
iterations to spare for a steady state."""
STEP_NAMES = ("environment", "engine", "doctor", "data", "seeds", "peer", "finetune", "report")
FINETUNE_SWEEP_NAME = "gpu-check-finetune"
FINETUNE_RECIPE = "finetune/gpt2_xl_mrpc_dp"
"""recipes/finetune/gpt2_xl_mrpc_{dp,z1,z2,z3,z3_offload}.yaml differ only in their zero block too."""
FINETUNE_MODEL = WORK / "gpt2-xl-random"
FINETUNE_EPOCHS = 10
"""Epochs over the shipped WNLI sample (64 examples: 2 steps of 32 each): 20 steps per setup."""


@dataclass(frozen=True)
class Command:
    """One command of a step: its argv, what it adds to the environment, and a path whose
    existence makes it unnecessary (`unless`)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unless: Path | None = None


@dataclass(frozen=True)
class Write:
    """A file the check writes itself, between a step's commands: its path, text and what it is for."""

    path: Path
    text: str
    why: str
    executable: bool = False


@dataclass
class Step:
    """One step: what it does in order, commands and files of the check's own."""

    name: str
    what: str
    commands: list[Command | Write] = field(default_factory=list)
    fatal: bool = True


@dataclass(frozen=True)
class Options:
    """What the check was asked for."""

    kit: Kit | None
    python: Path
    iters: int
    data: str | None
    results: Path | None
    home: Path


def venv_python(options: Options) -> Path:
    """The Python of the check's environment (the engine's: ZEROLAB_HOME/venv)."""
    return options.home / "venv" / "bin" / "python"


def data_prefix(options: Options) -> str:
    """The dataset the runs read: --data, else the bundled dolly sample prepared by the data step."""
    return options.data or str(WORK / "data" / "dolly_text_document")


def site_packages(python: Path) -> Path:
    """The site-packages directory of the virtual environment whose Python is `python`."""
    relative = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return python.parent.parent / relative


def check_marker(home: Path) -> Path:
    """The .pth file that marks ZEROLAB_HOME/venv as the check's environment (LINKS)."""
    return site_packages(home / "venv" / "bin" / "python") / LINKS


def check_home(home: Path) -> None:
    """Refuse an engine environment the check did not make: it would install into it."""
    venv = home / "venv"
    if (venv / "bin" / "python").is_file() and not check_marker(home).is_file():
        raise UserError(
            f"{venv} is an engine environment the GPU check did not make, and the check would install into "
            "it: run it with ZEROLAB_HOME set to another folder (e.g. ZEROLAB_HOME=~/.cache/zerolab-gpu)"
        )


def path_links() -> str:
    """A .pth file's text that puts this checkout's zerolab, then every package of the Python
    running the check (the machine's own, which may itself be a virtual environment, which
    --system-site-packages would reach past) on the check environment's path, after the
    environment's own packages."""
    directories = [path for path in site.getsitepackages() if Path(path).is_dir()]
    return "".join([f"{REPO_ROOT}\n", *(f"import site; site.addsitedir({path!r})\n" for path in directories)])


def torchrun_script(python: Path) -> str:
    """venv/bin/torchrun of the check's environment: torch's launcher run by `python`. The machine's
    own torchrun runs the machine's Python, which lacks DeepSpeed and the rest of the kit, and a
    virtual environment that links the machine's packages (path_links) gets no console scripts."""
    return f'#!/bin/sh\nexec {shlex.quote(str(python))} -m torch.distributed.run "$@"\n'


def steps(options: Options) -> list[Step]:
    """The check's steps for these options."""
    python = str(venv_python(options))
    zerolab = [python, "-m", "zerolab"]
    kit = options.kit
    links = check_marker(options.home)
    environment = Step(
        "environment",
        f"a virtual environment over {options.python} (for its CUDA torch), "
        + (f"filled from the kit {kit.root}" if kit else "filled from the package index"),
        commands=[
            Command(
                [str(options.python), "-m", "venv", str(options.home / "venv")], unless=venv_python(options)
            ),
            # first: it marks the environment as the check's (check_home) even if an install fails
            Write(links, path_links(), f"zerolab from {REPO_ROOT}, then {options.python}'s packages"),
            Write(
                Path(python).parent / "torchrun",
                torchrun_script(Path(python)),
                "torchrun for this environment's Python (the machine's runs the machine's Python)",
                executable=True,
            ),
        ],
    )
    if kit:
        wheels = [str(path) for path in kit.wheels]
        install = [python, "-m", "pip", "install", "--no-index", "--no-deps", *wheels]
        environment.commands.append(Command(install))
    else:
        requirements = str(REPO_ROOT / "docker" / "requirements-zerolab.txt")
        environment.commands.append(Command([python, "-m", "pip", "install", "-r", requirements]))
    sources = {}
    if kit:
        sources = {"ZEROLAB_ENGINE_SRC": str(kit.engine_git), "ZEROLAB_APEX_SRC": str(kit.apex_git)}
    jobs = {"MAX_JOBS": str(os.cpu_count() or 4)}
    left_out = [name for name in NOT_NEEDED if name in load_pins().python] if kit else []
    without = [arg for name in left_out for arg in ("--without", name)]
    prefix = data_prefix(options)
    sweep = [
        *zerolab,
        "sweep",
        SEED_RECIPE,
        SEED_SETUPS,
        "hardware.procs_per_node=1",
        f"train.iters={options.iters}",
        "train.log_interval=1",
        *([] if options.data else ["data=dolly-sample"]),
        f"data.path={prefix}",
        "--name",
        SWEEP_NAME,
    ]
    peer = [
        python,
        str(REPO_ROOT / "benchmarks" / "gpu_vs_peer.py"),
        *(["--data", options.data] if options.data else []),  # else it prepares the sample itself
        "--iters",
        str(options.iters),
        "--work",
        str(WORK / "gpu_vs_peer"),
        "--out",
        str(WORK / "gpu_vs_peer.md"),
    ]
    make_model = [python, "-m", "zerolab.gpucheck.finetune_model"]
    finetune = [
        *zerolab,
        "sweep",
        FINETUNE_RECIPE,
        SEED_SETUPS,
        "hardware.procs_per_node=1",
        f"finetune.model={FINETUNE_MODEL}",
        "finetune.task=wnli",
        f"finetune.data={SAMPLES_DIR / 'glue'}",
        f"train.epochs={FINETUNE_EPOCHS}",
        "train.log_interval=1",
        "--name",
        FINETUNE_SWEEP_NAME,
    ]
    report = [python, "-m", "zerolab.gpucheck.report", "--work", str(WORK)]
    if options.results:
        report += ["--results", str(options.results)]
    data = Step("data", f"the bundled dolly sample ({SAMPLE.name}) as an indexed dataset")
    if not options.data:
        data.commands.append(
            Command(
                [*zerolab, "prep", "dolly", "--input", str(SAMPLE), "--out", str(WORK / "data" / "dolly")]
            )
        )
    return [
        environment,
        Step(
            "engine",
            "zerolab engine install: the pins, the engine, apex, the fused kernels for this GPU",
            commands=[Command([*zerolab, "engine", "install", *without], sources | jobs)],
        ),
        Step("doctor", "zerolab doctor", commands=[Command([*zerolab, "doctor"])], fatal=False),
        data,
        Step(
            "seeds",
            f"the five seed recipes on one GPU, {options.iters} iterations each (one sweep)",
            commands=[Command(sweep)],
        ),
        Step(
            "peer",
            "benchmarks/gpu_vs_peer.py: zerolab against plain PyTorch, 124M and 1.5B, ZeRO-0 and 2",
            commands=[Command(peer)],
        ),
        Step(
            "finetune",
            "the five GPT-2 XL fine-tuning recipes on one GPU (random weights, the WNLI sample; one sweep)",
            commands=[
                Command([*make_model, str(FINETUNE_MODEL)], unless=FINETUNE_MODEL),
                Command(finetune),
            ],
        ),
        Step(
            "report", "benchmarks/gpu.md, its plots, and the runs as one tarball", commands=[Command(report)]
        ),
    ]


def describe(step: Step, number: int, total: int) -> list[str]:
    """The lines the check prints for a step before it runs it (and all that --dry-run prints)."""
    lines = [f"{number}/{total} {step.name}: {step.what}"]
    for command in step.commands:
        if isinstance(command, Write):
            lines.append(f"  - write {command.path}: {command.why}")
            continue
        settings = " ".join(f"{key}={shlex.quote(value)}" for key, value in command.env.items())
        unless = f"  (unless {command.unless} exists)" if command.unless else ""
        lines.append(f"  $ {settings + ' ' if settings else ''}{shlex.join(command.argv)}{unless}")
    return lines


def state_file(name: str) -> Path:
    """Where a completed step is recorded."""
    return REPO_ROOT / WORK / "steps" / f"{name}.json"


def run(options: Options, *, only: list[str] | None, dry_run: bool) -> int:
    """Run (or with `dry_run` print) the steps; a step recorded as completed is skipped unless
    `only` names it. 0 when every fatal step succeeded."""
    plan = steps(options)
    total = len(plan)
    for number, step in enumerate(plan, start=1):
        selected = only is None or step.name in only
        done = state_file(step.name).is_file()
        if not selected or (done and only is None):
            if not dry_run or done:
                print(f"{number}/{total} {step.name}: " + ("done before" if done else "not asked for"))
            continue
        for line in describe(step, number, total):
            print(line, flush=True)
        if dry_run:
            continue
        started = time.monotonic()
        failed = _execute(step)
        seconds = time.monotonic() - started
        if failed is not None and step.fatal:
            print(f"{number}/{total} {step.name}: FAILED after {seconds:.0f} s: {failed}", flush=True)
            return 1
        outcome = "done" if failed is None else f"done, with a problem: {failed}"
        print(f"{number}/{total} {step.name}: {outcome} in {seconds:.0f} s", flush=True)
        state_file(step.name).parent.mkdir(parents=True, exist_ok=True)
        state_file(step.name).write_text(json.dumps({"seconds": round(seconds, 1), "problem": failed}) + "\n")
    return 0


def _execute(step: Step) -> str | None:
    """Run a step's commands from the repository root and write its files, in order; what failed,
    or None."""
    for command in step.commands:
        if isinstance(command, Write):
            command.path.write_text(command.text)
            if command.executable:
                command.path.chmod(0o755)
            continue
        if command.unless is not None and command.unless.exists():
            print(f"  {command.unless} exists", flush=True)
            continue
        code = subprocess.call(command.argv, cwd=REPO_ROOT, env={**os.environ, **command.env})
        if code != 0:
            return f"`{shlex.join(command.argv[:4])} ...` exited with {code}"
    return None


def machine_python() -> Path:
    """The Python the check was started with: the machine's own, with its CUDA torch."""
    return Path(sys.executable)


def machine_problems() -> list[str]:
    """What this machine lacks for the check: a CUDA build of torch in this Python, a GPU."""
    problems = []
    try:
        # torch here, not at the top: only in the engine's environment
        import torch
    except ImportError:
        problems.append(
            f"{sys.executable} has no torch (run the check with the Python of the machine's CUDA torch: "
            "make gpu-check PYTHON=...)"
        )
    else:
        if torch.version.cuda is None:
            problems.append(
                f"{sys.executable}'s torch {torch.__version__} is a CPU build (run the check with "
                "the Python of the machine's CUDA torch: make gpu-check PYTHON=...)"
            )

    if not query_gpus():
        problems.append("nvidia-smi sees no GPU")
    return problems
