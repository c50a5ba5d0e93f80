"""`zerolab engine install` (`make setup`): the engine's virtual environment with every pin
of pins.toml, zerolab itself installed into it, and Megatron-DeepSpeed at the pinned commit.

Each step checks before it acts, so a second run (or an environment made by hand with
exactly the pins) costs seconds; what was set up is recorded in `install.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from zerolab import __version__
from zerolab.engine.checkout import checkout_commit, ensure_checkout
from zerolab.engine.paths import (
    REPO_ROOT,
    engine_dir,
    engine_python,
    install_record,
    torch_extensions_dir,
)
from zerolab.engine.pins import Pins, load_pins
from zerolab.errors import UserError

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

    @classmethod
    def wanted(cls, pins: Pins) -> InstallRecord:
        """The state an install with `pins` leaves behind on this machine."""
        return cls(
            engine_commit=pins.engine_commit,
            engine_dir=str(engine_dir()),
            engine_python=str(engine_python()),
            python_pins=dict(pins.python),
            zerolab_repo=str(REPO_ROOT),
            torch_extensions_dir=str(torch_extensions_dir()),
        )


def read_record() -> dict | None:
    """The last install's record (with `source`, `installed_at`, `zerolab_version`), or None."""
    try:
        return json.loads(install_record().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def engine_source(pins: Pins) -> str:
    """Where Megatron-DeepSpeed is cloned from: `ZEROLAB_ENGINE_SRC`, else the pinned upstream."""
    return os.environ.get(ENGINE_SRC_VARIABLE) or pins.engine_repo


def installed_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """The installed version of each distribution in `names` for `python` (None: not installed)."""
    result = subprocess.run(
        [str(python), "-c", _VERSIONS_SCRIPT, *names],
        capture_output=True,
        text=True,
        check=True,
        env=_clean_env(),
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


def zerolab_location(python: Path) -> Path | None:
    """The zerolab package directory that `python` imports, or None when it has none."""
    result = subprocess.run(
        [str(python), "-c", "import zerolab; print(zerolab.__file__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env=_clean_env(),
    )
    return Path(result.stdout.strip()).parent if result.returncode == 0 else None


def install(
    pins: Pins | None = None, *, prebuild: bool = True, console: Console | None = None
) -> InstallRecord:
    """Set up (or verify) the engine; returns what is installed. Safe to run again."""
    pins = pins or load_pins()
    console = console or Console(stderr=True)
    wanted = InstallRecord.wanted(pins)
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
    console.print(f"[bold]1/4[/] virtual environment {python.parent.parent}")
    if not python.is_file():
        _run([sys.executable, "-m", "venv", str(python.parent.parent)])
    else:
        console.print("  exists")

    console.print(f"[bold]2/4[/] pinned packages ({len(pins.python)} pins)")
    missing = pin_mismatches(python, pins.python)
    if "torch" in missing:
        # torch first and explicitly, at its pin: left to a dependency resolver it picks the
        # newest build (on PyPI, a multi-GB CUDA one).
        _pip(python, [f"torch=={pins.python['torch']}"])
    rest = [name for name in missing if name != "torch"]
    if rest:
        _pip(python, [f"{name}=={pins.python[name]}" for name in rest])
    if not missing:
        console.print("  every pin already installed")
    still = pin_mismatches(python, pins.python)
    if still:
        raise UserError(f"after pip install, still not at their pins: {still} (see pip's output above)")

    console.print(f"[bold]3/4[/] zerolab into the engine environment (from {REPO_ROOT})")
    if zerolab_location(python) == REPO_ROOT / "zerolab":
        console.print("  already installed from this checkout")
    else:
        _pip(python, ["--quiet", "--no-deps", "--no-build-isolation", "-e", str(REPO_ROOT)])

    console.print(f"[bold]4/4[/] Megatron-DeepSpeed at {pins.engine_commit[:12]}")
    source = engine_source(pins)
    ensure_checkout(
        engine_dir(),
        pins.engine_commit,
        source,
        what="Megatron-DeepSpeed",
        variable=ENGINE_SRC_VARIABLE,
        say=console.print,
    )

    if prebuild:
        _prebuild(python, console)

    install_record().parent.mkdir(parents=True, exist_ok=True)
    install_record().write_text(
        json.dumps(
            {
                **asdict(wanted),
                "source": source,
                "zerolab_version": __version__,
                "installed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"[green]engine ready[/]: {engine_dir()} with {python}")
    return wanted


def _prebuild(python: Path, console: Console) -> None:
    """Compile what the first run would otherwise compile, so runs start (and time) cleanly:
    Megatron's dataset helpers inside the engine tree and, on a CPU-only machine, DeepSpeed's
    shared-memory communication and CPU Adam (ZeRO offload) ops (JIT-built into
    torch_extensions_dir())."""
    console.print("  compiling Megatron's dataset helpers (once)")
    # As at launch, the engine's bin directory comes first on PATH: the Makefile asks `python3`
    # for pybind11's headers, and DeepSpeed builds with the `ninja` found there (another
    # ninja version keeps another build log, and rebuilds everything).
    env = {
        **_clean_env(),
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TORCH_EXTENSIONS_DIR": str(torch_extensions_dir()),
    }
    _run(["make", "-s", "-C", str(engine_dir() / "megatron" / "data")], env=env)
    if Path("/dev/nvidia0").exists():
        return
    console.print("  compiling DeepSpeed's CPU ops: shared-memory comm, cpu_adam (once; about a minute)")
    script = (
        "from deepspeed.accelerator import get_accelerator\n"
        "for name in ('ShareMemCommBuilder', 'CPUAdamBuilder'):\n"
        "    get_accelerator().create_op_builder(name).load(verbose=False)\n"
    )
    _run([str(python), "-c", script], env={**env, "DS_ACCELERATOR": "cpu"})


def _pip(python: Path, args: list[str]) -> None:
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args])


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a step with its output on the terminal (pip's and git's own progress)."""
    result = subprocess.run(argv, env=env or _clean_env(), check=False)
    if result.returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed with exit code {result.returncode} (output above)")


def _clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH/PYTHONHOME, so the engine Python sees only its own packages."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
