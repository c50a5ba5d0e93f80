"""`zerolab engine install` (`make setup`): the engine's virtual environment with every pin
of pins.toml (and what they need at requirements/engine.txt's versions), zerolab itself installed
into it, Megatron-DeepSpeed at the pinned commit, and what the engine compiles, built now so
that no run compiles: Megatron's dataset helpers (smoke-checked), and on CUDA
(zerolab.engine.cuda decides) apex's extensions and Megatron's fused kernels for the GPUs here,
or on CPU DeepSpeed's CPU ops.

Each step checks before it acts, so a second run (or an environment made by hand with
exactly the pins) costs seconds; what was set up is recorded in `install.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from zerolab import __version__
from zerolab.engine import cuda, data_helpers
from zerolab.engine.checkout import checkout_commit, ensure_checkout
from zerolab.engine.container import BASE_IMAGE_PACKAGES, kept_builds
from zerolab.engine.doctor import probe_engine
from zerolab.engine.locks import ENGINE_LOCK
from zerolab.engine.paths import (
    cuda_link_dir,
    engine_dir,
    engine_python,
    engine_python_env,
    torch_extensions_dir,
    zerolab_home,
)
from zerolab.engine.pins import Pins, load_pins
from zerolab.engine.record import read_record, write_record
from zerolab.errors import UserError
from zerolab.locations import REPO_ROOT

STEPS = 9
"""Steps of a whole install: four to set up, then prebuild_all's plan and four compile steps."""

CPU_OPS = {"deepspeed_shm_comm": "ShareMemCommBuilder", "cpu_adam": "CPUAdamBuilder"}
"""DeepSpeed's ops a CPU run loads (shared-memory communication, ZeRO offload's Adam), by their
builders: JIT-built into torch_extensions_dir() at setup rather than by the first run."""

CPU_STEP = "DeepSpeed's CPU ops"

BUILD = "zerolab.engine.build"
"""The engine's build steps, run by its own Python (as the Dockerfile runs them)."""

ENGINE_SRC_VARIABLE = "ZEROLAB_ENGINE_SRC"
"""A local git directory (bare or a checkout) to take Megatron-DeepSpeed from instead of upstream."""

_VERSIONS_SCRIPT = """
import json, sys
from importlib import metadata
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


@dataclass(frozen=True)
class InstallRecord:
    """What an install set up: compared with the wanted state to skip work on a second run."""

    engine_commit: str
    engine_dir: str
    engine_python: str
    python_pins: dict[str, str]
    zerolab_repo: str
    torch_extensions_dir: str
    apex_commit: str
    gpu_arch_list: str | None

    @classmethod
    def wanted(cls, pins: Pins, without: tuple[str, ...] = ()) -> InstallRecord:
        """The state an install with `pins` (less those named in `without`) leaves behind on this
        machine (for the GPUs that nvidia-smi sees, or TORCH_CUDA_ARCH_LIST)."""
        capabilities = [gpu.capability for gpu in cuda.query_gpus()]
        return cls(
            engine_commit=pins.engine_commit,
            engine_dir=str(engine_dir()),
            engine_python=str(engine_python()),
            python_pins={name: version for name, version in pins.python.items() if name not in without},
            zerolab_repo=str(REPO_ROOT),
            torch_extensions_dir=str(torch_extensions_dir()),
            apex_commit=pins.apex_commit,
            gpu_arch_list=cuda.env_arch_list() or cuda.arch_list(capabilities) or None,
        )


def engine_source(pins: Pins) -> str:
    """Where Megatron-DeepSpeed is cloned from: `ZEROLAB_ENGINE_SRC`, else the pinned upstream."""
    return os.environ.get(ENGINE_SRC_VARIABLE) or pins.engine_repo


def local_engine_source(pins: Pins) -> str:
    """Where a copy of Megatron-DeepSpeed is fetched from (the GPU kit, the image's CPU twin):
    `ZEROLAB_ENGINE_SRC`, else the engine checkout `make setup` made (at the pinned commit), else
    the pinned upstream."""
    if os.environ.get(ENGINE_SRC_VARIABLE):
        return os.environ[ENGINE_SRC_VARIABLE]
    if checkout_commit(engine_dir()) == pins.engine_commit:
        return str(engine_dir())
    return pins.engine_repo


def installed_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """The installed version of each distribution in `names` for `python` (None: not installed)."""
    result = subprocess.run(
        [str(python), "-c", _VERSIONS_SCRIPT, *names],
        capture_output=True,
        text=True,
        check=True,
        env=engine_python_env(),
    )
    return json.loads(result.stdout)


def pin_mismatches(python: Path, pins: dict[str, str]) -> dict[str, str | None]:
    """The pinned distributions `python` lacks or has at another version: name -> what it has.

    A local version label (torch's `+cpu`) does not count as a difference.
    """
    found = installed_versions(python, list(pins))
    return {
        name: have
        for name, have in found.items()
        if have is None or have.split("+", 1)[0] != pins[name].split("+", 1)[0]
    }


def torch_cuda(python: Path) -> str | None:
    """The CUDA version `python`'s torch is built for (torch.version.cuda); None for a CPU build or
    no torch."""
    result = subprocess.run(
        [str(python), "-c", "import torch; print(torch.version.cuda or '')"],
        capture_output=True,
        text=True,
        check=False,
        env=engine_python_env(),
    )
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def zerolab_location(python: Path) -> Path | None:
    """The zerolab package directory that `python` imports, or None when it has none."""
    result = subprocess.run(
        [str(python), "-c", "import zerolab; print(zerolab.__file__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env=engine_python_env(),
    )
    return Path(result.stdout.strip()).parent if result.returncode == 0 else None


def install(
    pins: Pins | None = None,
    *,
    without: tuple[str, ...] = (),
    prebuild: bool = True,
    cuda_builds: bool = False,
    console: Console | None = None,
) -> InstallRecord:
    """Set up (or verify) the engine; returns what is installed. Safe to run again. `without`
    names pins left uninstalled (an offline machine whose kit does not carry them); without
    `prebuild` nothing is compiled; `cuda_builds` also builds apex and the fused kernels on CUDA."""
    pins = pins or load_pins()
    unknown = sorted(set(without) - set(pins.python))
    if unknown:
        raise UserError(
            f"--without {', '.join(unknown)}: not a pin of zerolab/engine/pins.toml "
            f"(its pins: {', '.join(sorted(pins.python))})"
        )
    console = console or Console(stderr=True, soft_wrap=True)  # a path or a phrase is never broken mid-way
    wanted = InstallRecord.wanted(pins, without)
    record = read_record()
    python = engine_python()
    if (
        record
        and {key: record.get(key) for key in asdict(wanted)} == asdict(wanted)
        and python.is_file()
        and checkout_commit(engine_dir()) == pins.engine_commit
    ):
        console.print(f"[green]engine already set up[/] (recorded {record['installed_at']}): {engine_dir()}")
        return wanted

    console.rule("[bold]zerolab engine install")
    console.print(f"[bold]1/{STEPS}[/] virtual environment {python.parent.parent}")
    if not python.is_file():
        _run([sys.executable, "-m", "venv", str(python.parent.parent)])
    else:
        console.print("  exists")

    console.print(f"[bold]2/{STEPS}[/] pinned packages ({len(wanted.python_pins)} pins)")
    for name in without:
        console.print(f"  {name}: left out (--without)")
    missing = pin_mismatches(python, wanted.python_pins)
    cuda_build = torch_cuda(python) if any(name in missing for name in BASE_IMAGE_PACKAGES) else None
    kept = kept_builds(os.environ.get("ZEROLAB_IMAGE"), cuda_build)
    for name in kept:
        if missing.get(name) is not None:
            console.print(
                f"  {name} {missing.pop(name)}: this environment's own CUDA build, kept (pins.toml's "
                f"{pins.python[name]} is for the CPU set-up; pip's build of it would replace this one)"
            )
    if "torch" in missing:
        # torch first and explicitly, at its pin: left to a dependency resolver it picks the
        # newest build (on PyPI, a multi-GB CUDA one).
        _pip(python, ["-c", str(ENGINE_LOCK), f"torch=={pins.python['torch']}"])
    rest = [name for name in missing if name != "torch"]
    if rest:  # what the pins need at engine.txt's versions, the tested ones
        _pip(python, ["-c", str(ENGINE_LOCK), *(f"{name}=={pins.python[name]}" for name in rest)])
    if not missing:
        console.print("  every pin already installed")
    still = pin_mismatches(python, wanted.python_pins)
    still = {name: have for name, have in still.items() if name not in kept}
    if still:
        raise UserError(f"after pip install, still not at their pins: {still} (see pip's output above)")

    console.print(f"[bold]3/{STEPS}[/] zerolab into the engine environment (from {REPO_ROOT})")
    if zerolab_location(python) == REPO_ROOT / "zerolab":
        console.print("  already installed from this checkout")
    else:
        _pip(python, ["--quiet", "--no-deps", "--no-build-isolation", "-e", str(REPO_ROOT)])

    console.print(f"[bold]4/{STEPS}[/] Megatron-DeepSpeed at {pins.engine_commit[:12]}")
    source = engine_source(pins)
    ensure_checkout(
        engine_dir(),
        pins.engine_commit,
        source,
        what="Megatron-DeepSpeed",
        variable=ENGINE_SRC_VARIABLE,
        say=console.print,
    )

    built = prebuild_all(python, pins, console, cuda_builds=cuda_builds) if prebuild else {}
    if not prebuild:
        console.print(
            f"[bold]5/{STEPS}[/] nothing compiled (--no-build): the dataset helpers' sample index is "
            f"built by the engine's Python ({data_helpers.SMOKE_WORKAROUND}), apex stood in for by torch"
        )

    write_record(
        {
            **asdict(wanted),
            **built,
            "source": source,
            "zerolab_version": __version__,
            "installed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    )
    console.print(f"[green]engine ready[/]: {engine_dir()} with {python}")
    return wanted


def prebuild_all(python: Path, pins: Pins, console: Console, *, cuda_builds: bool = False) -> dict:
    """Compile what the first run would otherwise compile, so runs start (and time) cleanly,
    as zerolab.engine.cuda's plan says: the dataset helpers always, DeepSpeed's CPU ops on CPU,
    and on CUDA when `cuda_builds` asks apex and the fused kernels (otherwise launches use
    zerolab's torch stand-ins for apex and call no fused softmax kernel). Returns what
    install.json records of it: the plan and the helpers' smoke check (with the workaround runs
    use when it fails)."""

    toolkit = cuda.toolkit_home(python, os.environ)
    if toolkit is not None:
        linked = cuda.link_libraries(toolkit, cuda_link_dir())
        os.environ["CUDA_HOME"] = str(toolkit)
        paths = [str(cuda_link_dir()), os.environ.get("LIBRARY_PATH")]
        os.environ["LIBRARY_PATH"] = os.pathsep.join(path for path in paths if path)
        console.print(
            f"  CUDA toolkit from pip: CUDA_HOME={toolkit} ({len(linked)} link names in {cuda_link_dir()})"
        )
    probe = probe_engine(pins.python, cached=False)
    plan = cuda.plan(probe, cuda.query_gpus(), cuda.env_arch_list())
    console.print(f"[bold]5/{STEPS}[/] CUDA: {plan.reason if plan.needed else 'not used: ' + plan.reason}")
    if plan.problem:
        if plan.needed:
            raise UserError(f"the CUDA builds need {plan.problem['what']}; fix: {plan.problem['fix']}")
        console.print(f"  [yellow]warning[/]: missing {plan.problem['what']}; fix: {plan.problem['fix']}")
    # As at launch, the engine's bin directory comes first on PATH (engine_python_env): the Makefile
    # asks `python3` for pybind11's headers, and DeepSpeed builds with the `ninja` found there.
    env = engine_python_env()
    apex = [str(python), "-m", BUILD, "apex", "--workdir", str(zerolab_home() / "apex")]
    kernels = [str(python), "-m", BUILD, "fused-kernels", str(engine_dir())]
    recorded: dict = {"cuda": asdict(plan)}
    steps: list[tuple[str, bool, Callable[[], dict | None]]] = [  # (what, needed here, build: what to record)
        ("Megatron's dataset helpers", True, lambda: {"data_helpers": _dataset_helpers(python, console)}),
        (
            "apex's extensions",
            plan.needed and cuda_builds,
            lambda: _run(apex, env | {cuda.ARCH_LIST_VARIABLE: plan.arch_list}),
        ),
        ("Megatron's fused kernels", plan.needed and cuda_builds, lambda: _run(kernels, env)),
        (CPU_STEP, not plan.needed, lambda: _cpu_ops(python, probe, env, console)),
    ]
    for number, (step, needed, build) in enumerate(steps, start=6):
        if step == CPU_STEP:
            skipped = "not needed: the engine trains on CUDA"
        elif plan.needed:
            skipped = "not built (--cuda-builds builds it): zerolab's torch stand-ins replace apex at launch"
            if "kernels" in step:
                skipped = "not built (--cuda-builds builds it): only model.attention=megatron calls them"
        else:
            skipped = f"skipped: {plan.reason}"
        console.print(f"[bold]{number}/{STEPS}[/] {step}" + ("" if needed else f": {skipped}"))
        if needed:
            recorded |= build() or {}
    return recorded


def _cpu_ops(python: Path, probe: dict, env: dict[str, str], console: Console) -> None:
    """JIT-build DeepSpeed's CPU ops into torch_extensions_dir(), unless they are there."""
    if all(probe.get("ops", {}).get(op, {}).get("jit_built") for op in CPU_OPS):
        console.print(f"  {', '.join(CPU_OPS)} already built in {torch_extensions_dir()}")
        return
    console.print(f"  {', '.join(CPU_OPS)}, once (about a minute)")
    script = (
        "import sys\n"
        "from deepspeed.accelerator import get_accelerator\n"
        "for name in sys.argv[1:]:\n"
        "    get_accelerator().create_op_builder(name).load(verbose=False)\n"
    )
    _run([str(python), "-c", script, *CPU_OPS.values()], env={**env, "DS_ACCELERATOR": "cpu"})


def _dataset_helpers(python: Path, console: Console) -> dict:
    """Compile the dataset helpers and smoke-check them; a failed check is a warning (runs fall
    back to the engine's Python build_sample_idx), recorded with the workaround's name."""
    data_dir = engine_dir() / data_helpers.DATA_DIR
    module = data_helpers.build(data_dir, python)
    check = data_helpers.smoke_check(data_dir, python)
    if check.ok:
        console.print(f"  {module.name}: {check.detail}")
    else:
        console.print(
            f"  [yellow]warning[/]: {module.name}: {check.detail}; runs build the sample index with the "
            f"engine's Python implementation instead (workaround {data_helpers.SMOKE_WORKAROUND})"
        )
    workaround = None if check.ok else data_helpers.SMOKE_WORKAROUND
    return {"module": str(module), "ok": check.ok, "detail": check.detail, "workaround": workaround}


def _pip(python: Path, args: list[str]) -> None:
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args])


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a step with its output on the terminal (pip's and git's own progress)."""
    result = subprocess.run(argv, env=env or engine_python_env(), check=False)
    if result.returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed with exit code {result.returncode} (output above)")
