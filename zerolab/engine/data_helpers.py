"""Megatron's C++ dataset helpers (megatron/data/helpers.cpp, a pybind11 module that builds
the dataset's sample index): built for the engine's Python, and checked by calling
build_sample_idx in a process of their own, so that a crash is seen rather than suffered (on
one machine, pybind11 3.1.0 with numpy 2.5.2 segfaulted there and killed the run before its
first iteration). Where the check fails, runs use the engine's Python build_sample_idx instead
(zerolab.rank.workarounds.python_sample_index).

The engine's Makefile asks `python3-config --extension-suffix` for the module's file name; a
virtual environment has no python3-config, and another Python's names the wrong file, so the
suffix is given to make from the Python the helpers are for. Nor does make rebuild a module
newer than helpers.cpp that was built against other packages: a build here always compiles.
Standard library only: the engine's own Python runs it too.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from zerolab.contracts import SAMPLE_INDEX_OK, rank_script
from zerolab.engine.paths import zerolab_on_path
from zerolab.errors import UserError
from zerolab.logs.signals import killed_by

DATA_DIR = Path("megatron", "data")
"""Where the helpers live in the engine tree."""

SMOKE_WORKAROUND = "python_sample_index"
"""The workaround that takes over when the smoke check fails."""


@dataclass(frozen=True)
class SmokeCheck:
    """How the helpers' build_sample_idx fared: `ok`, and in words what happened."""

    ok: bool
    detail: str


def _env_of(python: Path) -> dict[str, str]:
    """This environment for `python` alone: its bin directory first on PATH (the Makefile runs
    `python3 -m pybind11 --includes`), no PYTHONPATH or PYTHONHOME (only its own packages)."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    return env | {"PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}"}


def extension_suffix(python: Path) -> str:
    """The file name suffix of `python`'s extension modules (`.cpython-311-x86_64-linux-gnu.so`)."""
    code = "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=_env_of(python))
    if result.returncode != 0 or not result.stdout.strip():
        raise UserError(f"{python} does not run: {(result.stderr.strip().splitlines() or ['no output'])[-1]}")
    return result.stdout.strip()


def module_path(data_dir: Path, suffix: str) -> Path:
    """The helpers' compiled module for a Python whose extension suffix is `suffix`."""
    return data_dir / f"helpers{suffix}"


def make_command(data_dir: Path, suffix: str, *, always: bool) -> list[str]:
    """The engine's own make, told the extension suffix (`always`: compile even if up to date)."""
    return ["make", *(["-B"] if always else []), "-C", str(data_dir), f"LIBEXT={suffix}"]


def build(data_dir: Path, python: Path) -> Path:
    """Compile the helpers in `data_dir` for `python` (its pybind11 and headers); the module."""
    suffix = extension_suffix(python)
    result = subprocess.run(make_command(data_dir, suffix, always=True), env=_env_of(python), check=False)
    if result.returncode != 0:
        raise UserError(
            f"compiling Megatron's dataset helpers in {data_dir} failed (output above): they need g++, make, "
            f"and the Python headers of {python} (e.g. apt-get install build-essential python3-dev)"
        )
    return module_path(data_dir, suffix)


def smoke_check(data_dir: Path, python: Path, timeout_s: float = 120) -> SmokeCheck:
    """Call the helpers' build_sample_idx with `python` in a separate process (the check
    zerolab.rank.sample_index_check, which every launch runs too) and check its answer; a crash, an
    import error or a wrong answer is reported, not raised."""
    try:
        result = subprocess.run(
            [str(python), str(rank_script("sample_index_check")), str(data_dir)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_env_of(python) | zerolab_on_path(),
        )
    except subprocess.TimeoutExpired:
        return SmokeCheck(False, f"build_sample_idx did not return within {timeout_s:.0f} s")
    if result.returncode < 0:
        return SmokeCheck(False, f"build_sample_idx {killed_by(-result.returncode)}")
    if result.returncode != 0 or SAMPLE_INDEX_OK not in result.stdout:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return SmokeCheck(False, f"build_sample_idx failed: {last[:300]}")
    return SmokeCheck(True, "build_sample_idx answers correctly")
