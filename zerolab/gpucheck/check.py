"""The GPU check's steps, in order, each one command (or a few) with its log and a time allowance:
a virtual environment over the machine's own Python and CUDA torch, filled from the kit, and the
engine checked out, nothing compiled; the bundled dolly sample prepared; ZeRO-0 and ZeRO-2 at GPT-2
1.5B micro 4 and ZeRO-0 at 124M micro 16 against the plain-PyTorch peer (benchmarks/gpu_vs_peer.py);
the seed setups ZeRO 0-3 and 3 with optimizer offload at 124M; the speed ladder on GPT-2 1.5B ZeRO-2
(`zerolab ladder`) with the time left; then the report (zerolab.gpucheck.report). The headline
figures come first, so that a check cut short still has them. Named steps beyond the budgeted plan
(the five seed recipes at 1.5B, the fine-tuning recipes) run when `--only` names them.

A step that completed is recorded in logs/gpu-check/steps/ and skipped when the check runs again,
so that a check cut short by a time limit goes on where it stopped. `--budget` refuses to start a
step whose allowance no longer fits and stops a step at its allowance's end. `--rehearse` runs the same
plan on this machine's CPU with the tiny model, each step's time recorded. Standard library only:
the machine's Python runs the first step before zerolab's dependencies are installed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import site
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zerolab.engine.cuda import query_gpus
from zerolab.engine.locks import ZEROLAB_LOCK
from zerolab.engine.pins import load_pins
from zerolab.errors import Interrupted, UserError
from zerolab.files import write_atomic, write_json_atomic
from zerolab.gpucheck.kit import NOT_NEEDED, Kit
from zerolab.locations import LOGS_DIR, REPO_ROOT, SAMPLES_DIR

WORK = LOGS_DIR / "gpu-check"
"""Where the check keeps its state, logs, data and runs (relative to the repository root)."""
REHEARSAL_WORK = LOGS_DIR / "gpu-check-rehearsal"
"""The same for a rehearsal on CPU, so that it never counts as a step of the real check."""
LOCK_FILE = ".lock"
"""In the check's folder while a check runs there (zerolab.contracts.holding: its pid)."""
SWEEP_NAME = "gpu-check"
SEED_RECIPE = "gpt2_dp"
SEED_SETUPS = "zero=z0,z1,z2,z3,z3_offload"
"""recipes/gpt2_{dp,z1,z2,z3,z3_offload}.yaml differ only in their zero block: a sweep of gpt2_dp
over it launches the seed recipes (offload compiles DeepSpeed's CPU Adam at its first use)."""
FASTEST = ["speed.compiled_layers=true", "speed.coalesced_grad_reduction=true"]
"""The speed switches off by default that the peer comparison and the seed setups run with: the
engine at its fastest (the ladder measures each switch on its own)."""
LADDER_RECIPE = "gpt2_z2"
SAMPLE = SAMPLES_DIR / "dolly151.jsonl"
LINKS = "zerolab-gpu-check.pth"
"""The .pth file that marks the check's environment and links zerolab and the machine's packages."""
MIN_ITERS = 20
"""The fewest iterations a seed run of the check may have: past the seed recipes' learning-rate
warm-up (train.lr_warmup_iters of configs/train/gpt2-seed.yaml, which zerolab refuses to outlast),
with iterations to spare for a steady state."""
DEFAULT_BUDGET_S = 540
"""The whole check's wall time on a started machine: 9 minutes."""
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
    """One step: what it does in order, commands and files of the check's own, and the seconds it
    is given (on a started H100: it is not started with fewer left in the check's budget)."""

    name: str
    what: str
    budget_s: int
    commands: list[Command | Write] = field(default_factory=list)
    fatal: bool = True
    rest: bool = False
    """Given what is left of the check's budget (budget_s is then the least it starts with)."""

    def allowance(self) -> str:
        """The step's allowance in words, as the check prints it."""
        return f"the time left, at least {self.budget_s} s" if self.rest else f"{self.budget_s} s"


@dataclass(frozen=True)
class Options:
    """What the check was asked for."""

    kit: Kit | None
    python: Path
    iters: int
    data: str | None
    results: Path | None
    home: Path
    budget_s: float = DEFAULT_BUDGET_S
    rehearse: bool = False
    cuda_builds: bool = False
    work_dir: Path | None = None

    @property
    def work(self) -> Path:
        """The check's folder: as given, else WORK, or REHEARSAL_WORK for a rehearsal."""
        return self.work_dir or (REHEARSAL_WORK if self.rehearse else WORK)


PEER_REPORT, FSDP2_REPORT = "gpu_vs_peer", "gpu_vs_peer_fsdp2"
"""The folders (and, with .md, the reports) of benchmarks/gpu_vs_peer.py's two steps in the check's folder."""


def sweep_name(work: Path, kind: str = "") -> str:
    """The name of the check's sweep of `kind` (the seeds: ""; "offload", "1.5b", "finetune"),
    under logs/sweeps/: the check's folder's name, then the kind."""
    return f"{work.name}-{kind}" if kind else work.name


@dataclass(frozen=True)
class Scale:
    """What the steps train: the GPU plan's models and recipes, or the rehearsal's tiny ones on CPU."""

    ladder: list[str]
    peer: list[str]
    seeds: list[str]
    seeds_1_5b: list[str]
    fsdp2: list[str]
    """benchmarks/gpu_vs_peer.py's cases of the fsdp2 step: the second engine beside the engine's ZeRO-0."""


GPU_PEER_LENGTH = ["--iters", "12", "--peer-steps", "4", "--peer-warmup-steps", "1", "--profile", "none"]
"""How long benchmarks/gpu_vs_peer.py measures each case in the GPU check's steps."""
REHEARSAL_PEER_LENGTH = ["--iters", "6", "--peer-steps", "2", "--profile", "none"]

GPU_SCALE = Scale(
    ladder=[LADDER_RECIPE, "hardware.procs_per_node=1", "--measured", "2", "--rounds", "2"],
    peer=["--cases", "1.5b:0,2", "124m:0", *GPU_PEER_LENGTH],
    seeds=[SEED_RECIPE, "model=gpt2-124m", "train.micro_batch_size=16", "hardware.procs_per_node=1"],
    seeds_1_5b=[SEED_RECIPE, "hardware.procs_per_node=1"],
    fsdp2=["--cases", "124m:0", "fsdp2/124m:0,2,3", "1.5b:0", "fsdp2/1.5b:0,2,3", *GPU_PEER_LENGTH],
)
"""The budgeted plan on one GPU: ZeRO-0 and ZeRO-2 against the peer at 1.5B micro 4 and ZeRO-0 at
124M micro 16, the seed setups at 124M micro 16, the ladder on GPT-2 1.5B ZeRO-2 (micro 4, global
batch 32 x 1024)."""
REHEARSAL_SCALE = Scale(
    ladder=[
        "cpu/tiny_z2",
        "model.attention=sdpa",
        "hardware.procs_per_node=1",
        "train.global_batch_size=2",  # one micro batch an iteration: its 60 iterations in a quarter the time
        "model.seq_length=32",  # the LM head in a quarter the time: the rehearsal proves the plan
        "--measured",
        "1",
        "--rounds",
        "2",
    ],
    peer=["--device", "cpu", "--tiny", "--cases", "tiny:0", *REHEARSAL_PEER_LENGTH],
    seeds=["cpu/tiny_dp", "hardware.procs_per_node=1", "model.attention=sdpa"],
    seeds_1_5b=["cpu/tiny_dp", "hardware.procs_per_node=1"],
    fsdp2=["--device", "cpu", "--tiny", "--cases", "tiny:0", "fsdp2/tiny:0,3", *REHEARSAL_PEER_LENGTH],
)
"""The same plan on this machine's CPU, with the tiny GPT-2 (one rank, as on the GPU)."""


def venv_python(options: Options) -> Path:
    """The Python of the check's environment (the engine's: ZEROLAB_HOME/venv)."""
    return options.home / "venv" / "bin" / "python"


def driver_python(options: Options) -> Path:
    """The Python that runs zerolab's commands: the check's environment, or in a rehearsal the one
    running the check (zerolab's own environment, beside this machine's engine set-up)."""
    return options.python if options.rehearse else venv_python(options)


def data_prefix(options: Options) -> str:
    """The dataset the runs read: --data, else the bundled dolly sample prepared by the data step."""
    return options.data or str(options.work / "data" / "dolly_text_document")


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


def environment_step(options: Options) -> Step:
    """The check's environment: a virtual environment over the machine's Python filled from the kit
    (or the package index), and the engine checked out by `zerolab engine install`, nothing compiled
    (unless --cuda-builds). A rehearsal uses this machine's engine set-up as it is."""
    python = str(venv_python(options))
    zerolab = [str(driver_python(options)), "-m", "zerolab"]
    kit = options.kit
    step = Step("environment", "", budget_s=45)
    if options.rehearse:
        step.what = f"this machine's engine set-up ({options.home}), checked: nothing installed or compiled"
        step.commands.append(Command([*zerolab, "engine", "install", "--no-build"]))
        return step
    step.what = f"a virtual environment over {options.python} (for its CUDA torch), " + (
        f"filled from the kit {kit.root}" if kit else "filled from the package index"
    )
    step.commands += [
        Command([str(options.python), "-m", "venv", str(options.home / "venv")], unless=venv_python(options)),
        # first: it marks the environment as the check's (check_home) even if an install fails
        Write(
            check_marker(options.home),
            path_links(),
            f"zerolab from {REPO_ROOT}, then {options.python}'s packages",
        ),
        Write(
            Path(python).parent / "torchrun",
            torchrun_script(Path(python)),
            "torchrun for this environment's Python (the machine's runs the machine's Python)",
            executable=True,
        ),
    ]
    if kit:
        step.commands.append(
            Command([python, "-m", "pip", "install", "--no-index", "--no-deps", *map(str, kit.wheels)])
        )
    else:
        step.commands.append(Command([python, "-m", "pip", "install", "-r", str(ZEROLAB_LOCK)]))
    sources = {"ZEROLAB_ENGINE_SRC": str(kit.engine_git)} if kit else {}
    if kit and kit.apex_git is not None:
        sources["ZEROLAB_APEX_SRC"] = str(kit.apex_git)
    left_out = [name for name in NOT_NEEDED if name in load_pins().python] if kit else []
    install = [*zerolab, "engine", "install", *(arg for name in left_out for arg in ("--without", name))]
    install.append("--cuda-builds" if options.cuda_builds else "--no-build")
    step.commands.append(Command(install, sources | {"MAX_JOBS": str(os.cpu_count() or 4)}))
    return step


def steps(options: Options) -> list[Step]:
    """The check's steps for these options: the budgeted plan, then the named steps."""
    python = str(driver_python(options))
    zerolab = [python, "-m", "zerolab"]
    scale = REHEARSAL_SCALE if options.rehearse else GPU_SCALE
    prefix = data_prefix(options)
    data_words = [*([] if options.data else ["data=dolly-sample"]), f"data.path={prefix}"]
    data = Step("data", f"the bundled dolly sample ({SAMPLE.name}) as an indexed dataset", budget_s=15)
    if not options.data:
        out = options.work / "data" / "dolly"
        data.commands.append(Command([*zerolab, "prep", "dolly", "--input", str(SAMPLE), "--out", str(out)]))
    ladder = [*zerolab, "ladder", *scale.ladder, *data_words, "--run-dir", str(options.work / "ladder")]

    def sweep(words: list[str], setups: str, name: str) -> list[str]:
        length = [f"train.iters={options.iters}", "train.log_interval=1", "train.eval_iters=1"]
        return [*zerolab, "sweep", words[0], setups, *words[1:], *length, *data_words, "--name", name]

    def against_peer(cases: list[str], name: str) -> list[str]:
        return [
            python,
            str(REPO_ROOT / "benchmarks" / "gpu_vs_peer.py"),
            *cases,
            *(word for setting in FASTEST for word in ("--set", setting)),
            "--data",
            prefix,
            "--work",
            str(options.work / name),
            "--out",
            str(options.work / f"{name}.md"),
        ]

    make_model = [python, "-m", "zerolab.gpucheck.finetune_model", str(FINETUNE_MODEL)]
    finetune = [
        *zerolab,
        "sweep",
        FINETUNE_RECIPE,
        "zero=z0,z1,z2,z3,z3_offload",
        "hardware.procs_per_node=1",
        f"finetune.model={FINETUNE_MODEL}",
        "finetune.task=wnli",
        f"finetune.data={SAMPLES_DIR / 'glue'}",
        f"train.epochs={FINETUNE_EPOCHS}",
        "train.log_interval=1",
        "--name",
        sweep_name(options.work, "finetune"),
    ]
    if options.rehearse:
        finetune[4:5] = ["finetune/cpu/tiny_wnli_dp"]
    report = [python, "-m", "zerolab.gpucheck.report", "--work", str(options.work)]
    if options.results:
        report += ["--results", str(options.results)]
    return [
        environment_step(options),
        data,
        Step(
            "peer",
            "benchmarks/gpu_vs_peer.py: zerolab (the default switches and the fastest) against plain PyTorch",
            budget_s=270,
            commands=[Command(against_peer(scale.peer, PEER_REPORT))],
            fatal=False,
        ),
        Step(
            "seeds",
            f"the seed setups {SEED_SETUPS} at {' '.join(scale.seeds[1:])}, {options.iters} iterations each",
            budget_s=150,
            commands=[Command(sweep([*scale.seeds, *FASTEST], SEED_SETUPS, sweep_name(options.work)))],
            fatal=False,
        ),
        Step(
            "ladder",
            f"zerolab ladder {' '.join(scale.ladder)}: the speed switches turned between iterations",
            budget_s=45,
            commands=[Command(ladder)],
            fatal=False,
            rest=True,
        ),
        Step("report", "benchmarks/gpu.md, and the results folder", budget_s=10, commands=[Command(report)]),
        Step(
            "seeds_1_5b",
            "the five seed recipes as shipped (GPT-2 1.5B) on one GPU",
            budget_s=480,
            commands=[Command(sweep(scale.seeds_1_5b, SEED_SETUPS, sweep_name(options.work, "1.5b")))],
            fatal=False,
        ),
        Step(
            "fsdp2",
            "benchmarks/gpu_vs_peer.py: PyTorch FSDP2 (DDP, z2, z3) beside the engine's ZeRO-0 and the peer",
            budget_s=480,
            commands=[Command(against_peer(scale.fsdp2, FSDP2_REPORT))],
            fatal=False,
        ),
        Step(
            "finetune",
            "the five GPT-2 XL fine-tuning recipes on one GPU (random weights, the WNLI sample; one sweep)",
            budget_s=480,
            commands=[Command(make_model, unless=FINETUNE_MODEL), Command(finetune)],
            fatal=False,
        ),
    ]


PLANNED = ("environment", "data", "peer", "seeds", "ladder", "report")
"""The steps a check runs unless --only names others: the budgeted plan, headline figures first."""
STEP_NAMES = (*PLANNED, "seeds_1_5b", "fsdp2", "finetune")


def describe(step: Step, number: int, total: int) -> list[str]:
    """The lines the check prints for a step before it runs it (and all that --dry-run prints)."""
    lines = [f"{number}/{total} {step.name} ({step.allowance()}): {step.what}"]
    for command in step.commands:
        if isinstance(command, Write):
            lines.append(f"  - write {command.path}: {command.why}")
            continue
        settings = " ".join(f"{key}={shlex.quote(value)}" for key, value in command.env.items())
        unless = f"  (unless {command.unless} exists)" if command.unless else ""
        lines.append(f"  $ {settings + ' ' if settings else ''}{shlex.join(command.argv)}{unless}")
    return lines


def state_file(work: Path, name: str) -> Path:
    """Where a completed step of the check in `work` is recorded."""
    return REPO_ROOT / work / "steps" / f"{name}.json"


def run(
    options: Options,
    *,
    only: list[str] | None,
    dry_run: bool,
    after_step: Callable[[], None] | None = None,
) -> int:
    """Run (or with `dry_run` print) the planned steps, or those `only` names; a step recorded as
    completed is skipped unless `only` names it. A step is not started when its budget no longer
    fits in what is left of options.budget_s (the report's kept aside), and is stopped when the
    budget runs out. `after_step` runs after each step (the report, so that a check cut short
    leaves its results). 0 when every fatal step succeeded."""
    plan = steps(options)
    total = len(plan)
    report = next(step for step in plan if step.name == "report")
    started = time.monotonic()
    for number, step in enumerate(plan, start=1):
        selected = step.name in (only or PLANNED)
        done = state_file(options.work, step.name).is_file()
        if not selected or (done and only is None):
            if not dry_run or done:
                print(f"{number}/{total} {step.name}: " + ("done before" if done else "not asked for"))
            continue
        for line in describe(step, number, total):
            print(line, flush=True)
        if dry_run:
            continue
        reserve = 0 if step is report else report.budget_s
        left = options.budget_s - (time.monotonic() - started) - reserve
        if step.budget_s > left:
            print(
                f"{number}/{total} {step.name}: not started: it is given {step.allowance()} and "
                f"{max(left, 0):.0f} s of the check's --budget {options.budget_s:.0f} are left",
                flush=True,
            )
            continue
        began = time.monotonic()
        given = left if step.rest else step.budget_s
        try:
            failed = _execute(step, timeout_s=given)
        except KeyboardInterrupt:
            raise Interrupted(
                f"step {number}/{total} {step.name} was stopped (it runs again from its start), the steps "
                f"done before it are recorded in {state_file(options.work, step.name).parent}: run the same "
                "command again to go on"
            ) from None
        seconds = time.monotonic() - began
        if failed is not None and step.fatal:
            print(f"{number}/{total} {step.name}: FAILED after {seconds:.0f} s: {failed}", flush=True)
            return 1
        outcome = "done" if failed is None else f"done, with a problem: {failed}"
        print(f"{number}/{total} {step.name}: {outcome} in {seconds:.0f} s", flush=True)
        record = {"seconds": round(seconds, 1), "budget_s": round(given), "problem": failed}
        state_file(options.work, step.name).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(state_file(options.work, step.name), record)
        if after_step is not None and step is not report:
            after_step()
    return 0


def _execute(step: Step, timeout_s: float) -> str | None:
    """Run a step's commands from the repository root and write its files (whole), in order,
    stopping a command (its whole process group, started in a session of its own that a terminal's
    Ctrl-C does not reach) when `timeout_s` has passed or Ctrl-C stops the check; what failed, or None."""
    deadline = time.monotonic() + timeout_s
    for command in step.commands:
        if isinstance(command, Write):
            command.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(command.path, command.text, mode=0o755 if command.executable else None)
            continue
        if command.unless is not None and command.unless.exists():
            print(f"  {command.unless} exists", flush=True)
            continue
        env = {**os.environ, **command.env}
        process = subprocess.Popen(command.argv, cwd=REPO_ROOT, env=env, start_new_session=True)
        try:
            code = process.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            _stop(process)
            return f"`{shlex.join(command.argv[:4])} ...` stopped at the check's budget"
        except BaseException:  # Ctrl-C: the command's own session would outlive the check
            _stop(process)
            raise
        if code != 0:
            return f"`{shlex.join(command.argv[:4])} ...` exited with {code}"
    return None


def _stop(process: subprocess.Popen) -> None:
    """Stop a step's command and everything it started: SIGTERM to its process group, SIGKILL to
    what is left of it 20 s later."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with contextlib.suppress(ProcessLookupError):  # what the leader left behind in its group
        os.killpg(process.pid, signal.SIGKILL)


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
