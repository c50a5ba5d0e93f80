"""The GPU kit: everything the GPU check needs that an offline NVIDIA machine lacks, in one folder,
gathered on a machine with network access (`make gpu-kit DIR=...`) and read on the GPU machine
(`make gpu-check KIT=...`). This module owns its layout:

    kit.json                 what is inside, and for which Python and machine
    Megatron-DeepSpeed.git/  a bare git repository holding only the pinned engine commit
    apex.git/                the same for apex's pinned commit, only when asked (--apex: the check's
                             --cuda-builds builds it; by default the engine runs on torch stand-ins)
    wheels/                  wheels for the GPU machine's Python: the engine's pins (less torch,
                             the machine's own CUDA build) and zerolab's runtime dependencies,
                             with what they need; DeepSpeed as a wheel built here

Given the GPU machine's package list (`python3 -m pip list --format=freeze` there), the kit leaves
out every package of pins.toml the machine has at its pin and every other package the machine has
at all, so that it stays small enough to carry. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from zerolab import __version__
from zerolab.engine.container import canonical_name, requirement_name
from zerolab.engine.install import local_engine_source
from zerolab.engine.locks import ENGINE_LOCK, ZEROLAB_LOCK
from zerolab.engine.paths import engine_python
from zerolab.engine.pins import Pins, load_pins
from zerolab.errors import UserError
from zerolab.locations import REPO_ROOT

MANIFEST = "kit.json"
ENGINE_GIT = "Megatron-DeepSpeed.git"
APEX_GIT = "apex.git"
WHEELS = "wheels"
PINNED_REF = "refs/heads/pinned"
"""The branch each of the kit's repositories holds, at the pinned commit."""


NOT_NEEDED = {
    "torch": "the GPU machine's own CUDA build is used (as in the GPU image)",
    "tensorboard": "the check's runs do not log to TensorBoard",
    "wandb": "the check's runs do not log to W&B",
    "datasets": "only `zerolab prep dolly` without --input downloads with it; the check prepares "
    "the bundled sample",
    "lm_eval": "`zerolab eval --scorer lm-eval` scores on CPU, not in the check (and some of its "
    "dependencies come only as source)",
    "accelerate": "lm-evaluation-harness's, for the same reason",
    "scikit-learn": "fine-tuning's GLUE metrics: the check does not fine-tune yet",
    "scipy": "fine-tuning's GLUE metrics (STS-B), for the same reason",
}
"""Pinned packages the kit leaves out, and why."""

KIT_LOCKS = (ZEROLAB_LOCK, ENGINE_LOCK)
"""The constraints of the kit's download: every wheel at the version the tests ran."""

PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
"""The Linux x86-64 wheel tags pip may take for the GPU machine (glibc 2.28 or later)."""

_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-")


@dataclass(frozen=True)
class Kit:
    """A gathered kit: its folder and manifest."""

    root: Path
    manifest: dict

    @property
    def engine_git(self) -> Path:
        return self.root / ENGINE_GIT

    @property
    def apex_git(self) -> Path | None:
        """apex's repository, when the kit carries it."""
        return self.root / APEX_GIT if "apex" in self.manifest else None

    @property
    def wheels(self) -> list[Path]:
        return sorted((self.root / WHEELS).glob("*.whl"))


def read_kit(root: Path, pins: Pins | None = None) -> Kit:
    """The kit in `root`, checked against `pins` (default: this checkout's); a UserError says what
    is wrong."""
    fix = f"gather it again on a machine with network access: make gpu-kit DIR={root}"
    manifest_path = root / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise UserError(f"{manifest_path}: not found, so {root} is no GPU kit; {fix}") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{manifest_path}: not JSON ({error.msg}); {fix}") from None
    pins = pins or load_pins()
    kit = Kit(root, manifest)
    carried = [("engine", kit.engine_git, pins.engine_commit)]
    if kit.apex_git is not None:
        carried.append(("apex", kit.apex_git, pins.apex_commit))
    for what, path, wanted in carried:
        if manifest.get(what, {}).get("commit") != wanted:
            raise UserError(
                f"{manifest_path}: {what} commit {manifest.get(what, {}).get('commit')}, but pins.toml pins "
                f"{wanted}; {fix}"
            )
        if not path.is_dir():
            raise UserError(f"{path}: missing from the kit; {fix}")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest.get("python") != python:
        raise UserError(
            f"{manifest_path}: wheels for Python {manifest.get('python')}, but this is Python {python}; "
            f"{fix} PYTHON_VERSION={python}"
        )
    return kit


def parse_freeze(text: str) -> dict[str, str]:
    """`name==version` lines (pip list --format=freeze, pip freeze) as canonical name -> version;
    other lines (editable installs, comments) are skipped."""
    found = {}
    for line in text.splitlines():
        name = requirement_name(line)
        if name and "==" in line:
            found[name] = line.split("#", 1)[0].split("==", 1)[1].strip()
    return found


def wheel_identity(path: Path) -> tuple[str, str]:
    """(canonical name, version) from a wheel's file name."""
    match = _WHEEL_NAME.match(path.name)
    if not match:
        raise ValueError(f"{path.name}: not a wheel file name")
    return canonical_name(match["name"]), match["version"]


def kit_requirements() -> list[str]:
    """What the GPU check installs: pins.toml's pins and zerolab's own dependencies, less NOT_NEEDED
    (the versions of these and of what they need: the locks, KIT_LOCKS)."""
    lines = load_pins().requirements(without=tuple(NOT_NEEDED))
    for line in metadata.requires("zerolab") or []:
        name = requirement_name(line)
        if name and name not in NOT_NEEDED and "extra ==" not in line:
            lines.append(line)
    return lines


def left_out(wheels: list[Path], pinned: set[str], machine: dict[str, str]) -> dict[str, str]:
    """Wheels the GPU machine makes unnecessary (file name -> why): an engine package pinned in
    pins.toml that it has at the pinned version, any other package (zerolab's own dependencies,
    which pyproject.toml asks for by range, and what the packages need) that it has at all."""
    reasons = {}
    for wheel in wheels:
        name, version = wheel_identity(wheel)
        have = machine.get(name)
        if have is None:
            continue
        if name not in pinned:
            reasons[wheel.name] = f"the machine has {name} {have}"
        elif have.split("+", 1)[0] == version:
            reasons[wheel.name] = f"the machine has {name} {have}, the pinned version"
    return reasons


def wheel_requirements(wheel: Path) -> list[str]:
    """A wheel's Requires-Dist lines without extras-only ones."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    lines = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return [line for line in lines if "extra ==" not in line]


def gather(
    out: Path,
    *,
    engine_python: Path,
    python_version: str,
    machine: dict[str, str],
    apex: bool = False,
    pins: Pins | None = None,
) -> Kit:
    """Gather a kit for `pins` (default: this checkout's) into `out`, which must not exist: written
    in a partial folder beside it, moved into place when whole. `apex`: carry apex's source too."""
    if out.exists():
        raise UserError(f"{out}: exists; remove it or name another folder (make gpu-kit DIR=...)")
    if not engine_python.is_file():
        raise UserError(
            f"no engine environment at {engine_python} (run: make setup): the kit's DeepSpeed "
            "wheel is built by it"
        )
    pins = pins or load_pins()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-partial-", dir=out.parent))
    try:
        print(f"1/4 Megatron-DeepSpeed {pins.engine_commit[:12]} -> {ENGINE_GIT}", flush=True)
        _bare_copy(local_engine_source(pins), pins.engine_commit, staging / ENGINE_GIT)
        if apex:
            print(f"2/4 apex {pins.apex_commit[:12]} -> {APEX_GIT}", flush=True)
            source = os.environ.get("ZEROLAB_APEX_SRC") or pins.apex_repo
            _bare_copy(source, pins.apex_commit, staging / APEX_GIT)
        else:
            print("2/4 apex: not carried (the engine runs on zerolab's torch stand-ins; --apex carries it)")
        wheels = staging / WHEELS
        print(f"3/4 DeepSpeed {pins.python['deepspeed']} as a wheel (built by {engine_python})", flush=True)
        _run(
            [
                str(engine_python),
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(wheels),
                f"deepspeed=={pins.python['deepspeed']}",
            ],
            env={**os.environ, "DS_BUILD_OPS": "0"},
        )
        (deepspeed,) = wheels.glob("deepspeed-*.whl")
        requirements = [r for r in kit_requirements() if requirement_name(r) != "deepspeed"]
        requirements += [r for r in wheel_requirements(deepspeed) if requirement_name(r) != "torch"]
        print(f"4/4 wheels for Python {python_version}: {len(requirements)} requirements and theirs")
        listing = staging / "requirements.txt"
        listing.write_text("\n".join(requirements) + "\n")
        platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--python-version",
                python_version,
                "--implementation",
                "cp",
                *platforms,
                "-d",
                str(wheels),
                "-r",
                str(listing),
                *(word for lock in KIT_LOCKS for word in ("-c", str(lock))),
            ]
        )
        listing.unlink()
        pinned = {canonical_name(name) for name in pins.python}
        dropped = left_out(sorted(wheels.glob("*.whl")), pinned, machine)
        for name in dropped:
            (wheels / name).unlink()
        manifest = {
            "zerolab_version": __version__,
            "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "engine": {"commit": pins.engine_commit, "repository": ENGINE_GIT},
            **({"apex": {"commit": pins.apex_commit, "repository": APEX_GIT}} if apex else {}),
            "python": python_version,
            "platforms": list(PLATFORMS),
            "not_needed": NOT_NEEDED,
            "machine_packages": len(machine),
            "left_out": dropped,
            "wheels": {path.name: path.stat().st_size for path in sorted(wheels.glob("*.whl"))},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Kit(out, manifest)


def _bare_copy(source: str, commit: str, target: Path) -> None:
    """A bare repository at `target` holding `commit` alone (shallow), on the branch `pinned`."""
    _run(["git", "init", "--quiet", "--bare", str(target)])
    fetched = subprocess.run(
        ["git", "-C", str(target), "fetch", "--quiet", "--depth", "1", source, commit], check=False
    )
    if fetched.returncode != 0:
        _run(["git", "-C", str(target), "fetch", "--quiet", source, "+refs/heads/*:refs/remotes/source/*"])
    _run(["git", "-C", str(target), "update-ref", PINNED_REF, commit])
    _run(["git", "-C", str(target), "gc", "--quiet", "--prune=now"])


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    if subprocess.run(argv, check=False, env=env).returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed (output above)")


def size_mib(path: Path) -> float:
    """The size of everything under `path`, in MiB."""
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file()) / 2**20


CARRY_LIMIT_MIB = 64
"""What a lent GPU machine of this workplace takes along: the working tree and the kit together."""


def working_tree_mib(root: Path = REPO_ROOT, besides: Path | None = None) -> float | None:
    """The files git would carry from the checkout at `root` (tracked, and untracked but not
    ignored), in MiB, less those under `besides` (a kit inside the checkout travels once, counted
    as the kit); None outside a git checkout."""
    listing = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if listing.returncode != 0:
        return None
    paths = [root / name for name in listing.stdout.decode().split("\0") if name]
    if besides is not None:
        paths = [path for path in paths if not path.resolve().is_relative_to(besides.resolve())]
    return sum(path.stat().st_size for path in paths if path.is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    """`python -m zerolab.gpucheck.kit DIR [--machine FREEZE] [--python-version 3.12]`."""
    parser = argparse.ArgumentParser(prog="make gpu-kit", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the kit's folder (must not exist)")
    parser.add_argument("--machine", type=Path, help="`pip list --format=freeze` of the GPU machine's Python")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--apex", action="store_true", help="carry apex's source too (for --cuda-builds)")
    args = parser.parse_args(argv)

    try:
        machine = parse_freeze(args.machine.read_text()) if args.machine else {}
        python = engine_python()
        version = args.python_version
        kit = gather(args.out, engine_python=python, python_version=version, machine=machine, apex=args.apex)
    except (UserError, OSError) as error:
        print(f"zerolab: error: {error}", file=sys.stderr)
        return 2
    wheels = kit.manifest["wheels"]
    tree = working_tree_mib(besides=kit.root)
    if tree is not None:
        total = tree + size_mib(kit.root)
        verdict = "within" if total <= CARRY_LIMIT_MIB else "OVER"
        print(f"kit + working tree: {total:.1f} MiB, {verdict} the {CARRY_LIMIT_MIB} MiB a lent GPU carries")
    print(
        f"kit: {kit.root}, {size_mib(kit.root):.1f} MiB: {len(wheels)} wheels "
        f"({sum(wheels.values()) / 2**20:.1f} MiB), the engine{' and apex' if args.apex else ''} at the "
        "pinned commits; "
        f"{len(kit.manifest['left_out'])} wheels left out as the machine has them"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
