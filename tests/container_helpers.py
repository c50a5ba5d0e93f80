"""The image's CPU twin for the container tier (tests/container/): the tool that builds and runs it
(podman, else docker with a running engine), the flags `podman run` needs on machines like ours
(README.md, "The image on CPU"), and the build, by docker/cpu-twin.sh as a user runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from zerolab.engine.install import ENGINE_SRC_VARIABLE, local_engine_source
from zerolab.engine.pins import load_pins

REPO_ROOT = Path(__file__).resolve().parents[1]
TWIN_SCRIPT = REPO_ROOT / "docker" / "cpu-twin.sh"
TWIN_IMAGE = "localhost/zerolab:cpu"
WORKSPACE = "/workspace/zerolab"
"""The repository inside the image; its logs/ and data/ are the volumes a run writes."""
BUILD_TIMEOUT_S = 45 * 60


@dataclass(frozen=True)
class Twin:
    """A built twin: the tool, the image, and how long its build took (with the base's)."""

    tool: str
    image: str
    build_s: float


def container_tool() -> tuple[str | None, str]:
    """(podman or docker, or None; why none): CONTAINER_TOOL, else podman, else a docker whose
    engine answers."""
    wanted = os.environ.get("CONTAINER_TOOL")
    if wanted:
        return (wanted, "") if shutil.which(wanted) else (None, f"CONTAINER_TOOL={wanted} is not on PATH")
    if shutil.which("podman"):
        return "podman", ""
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker", ""
    return (
        None,
        "neither podman nor a running docker engine (as root: apt-get install podman mmdebstrap runc)",
    )


PODMAN_FLAGS = ("--runtime", "runc", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")
"""What podman needs here, to build and to run: runc (crun refuses a mixed cgroup v1/v2 layout) and
limits a sandboxed root may set (podman's defaults are above them). The README's command has them."""
SHM_SIZE = "--shm-size=1g"
"""Each rank maps DeepSpeed's 64 MiB CPU all-reduce buffer in /dev/shm; a container gets 64 MB."""


def run_flags(tool: str) -> list[str]:
    """PODMAN_FLAGS for podman (without runc where it is not installed: podman's own runtime); docker
    needs none."""
    if tool != "podman":
        return []
    return list(PODMAN_FLAGS if shutil.which("runc") else PODMAN_FLAGS[2:])


def run_argv(
    twin: Twin, *command: str, user: str | None = None, mounts: dict[Path, str] | None = None
) -> list[str]:
    """`podman run` of `command` in the twin as the README writes it: the host's folders mounted,
    the ranks' shared memory (--shm-size) large enough for DeepSpeed's shm collectives."""
    volumes = [f"--volume={host}:{inside}" for host, inside in (mounts or {}).items()]
    return [
        twin.tool,
        "run",
        "--rm",
        *run_flags(twin.tool),
        SHM_SIZE,
        *([f"--user={user}"] if user else []),
        *volumes,
        twin.image,
        *command,
    ]


def build_twin(tool: str, log: Path) -> Twin:
    """docker/cpu-twin.sh, its output in `log`: the engine fetched from a local copy where there is
    one (ZEROLAB_ENGINE_SRC, else `make setup`'s checkout), so that no build needs GitHub."""
    env = {**os.environ, "CONTAINER_TOOL": tool}
    source = local_engine_source(load_pins())
    if Path(source).is_dir():
        env[ENGINE_SRC_VARIABLE] = source
    start = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run(
            [str(TWIN_SCRIPT), TWIN_IMAGE],
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            env=env,
            timeout=BUILD_TIMEOUT_S,
        )
    seconds = time.monotonic() - start
    if result.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise AssertionError(
            f"docker/cpu-twin.sh failed (exit {result.returncode}) after {seconds:.0f} s:\n{tail}"
        )
    return Twin(tool, result.stdout.strip().splitlines()[-1], seconds)
