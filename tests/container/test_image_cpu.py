"""The container tier: the image's CPU twin (the Dockerfile with ACCELERATOR=cpu on
docker/cpu-base.sh's Debian base) built with podman (or docker) by docker/cpu-twin.sh, then used as
the README says: `zerolab doctor` in it, a shipped recipe's `.sh` wrapper trained in it with the
host's logs/ and data/ mounted and written as the host user, `tools/summarize logs/` on the host.
And the build's own check: it fails where the dataset helpers are broken. `make test-container`;
tests/unit/test_dockerfile.py checks the Dockerfile without a container engine."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
from container_helpers import REPO_ROOT, WORKSPACE, Twin, build_twin, container_tool, run_argv, run_flags
from data_helpers_standins import SEGFAULTING_HELPERS
from dockerfile_parse import DockerfileParser

from zerolab.engine.container import DEEPSPEED_OPS
from zerolab.recipe.compose import load_recipe

STANDIN_UID = 4321
"""The host user the run is written as where the tests run as root (CI): any uid but 0."""
PREPARE_COMMAND = tuple(shlex.split(load_recipe("cpu/tiny_z3_offload").data.prepare_command))
"""The recipe's own data preparation, run in the container before its wrapper, as a user does."""
BROKEN_IMAGE = "localhost/zerolab:cpu-broken-helpers"
"""Never made: its build must fail."""


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Twin:
    tool, why = container_tool()
    if tool is None:
        pytest.skip(why)
    log = tmp_path_factory.mktemp("build") / "cpu-twin.log"
    twin = build_twin(tool, log)
    print(f"\nCPU twin {twin.image}: built by {tool} in {twin.build_s:.0f} s (log: {log})", file=sys.stderr)
    return twin


def test_doctor_in_the_twin_says_ready_to_train(twin):
    result = subprocess.run(run_argv(twin, "zerolab", "doctor"), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ready to train" in result.stdout
    assert re.search(r"DeepSpeed\W+0\.19\.6 \(accelerator: cpu\)", result.stdout), result.stdout
    for op in DEEPSPEED_OPS["cpu"]:  # prebuilt (the table's first column): nothing compiles at a run's start
        assert re.search(rf"\b{op}\W+yes\b", result.stdout), result.stdout


def test_the_recipe_wrapper_trains_in_the_twin_as_the_host_user_and_the_host_summarizes(twin, tmp_path):
    uid = os.getuid() or STANDIN_UID
    gid = os.getgid() if os.getuid() else STANDIN_UID
    logs, data = tmp_path / "logs", tmp_path / "data"
    for folder in (logs, data):
        folder.mkdir()
        os.chown(folder, uid, gid)
    mounts = {logs: f"{WORKSPACE}/logs", data: f"{WORKSPACE}/data"}
    for command in (PREPARE_COMMAND, ("recipes/cpu/tiny_z3_offload.sh",)):
        argv = run_argv(twin, *command, user=f"{uid}:{gid}", mounts=mounts)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]

    (run,) = [path.parent for path in logs.glob("tiny_z3_offload/*/recipe.yaml")]
    written = [path for path in (*logs.rglob("*"), *data.rglob("*"))]
    assert list(data.glob("dolly-sample_text_document.*")), "the recipe prepares its data in data/"
    not_theirs = [str(path) for path in written if (path.lstat().st_uid, path.lstat().st_gid) != (uid, gid)]
    assert not not_theirs, f"written as another user than {uid}:{gid}: {not_theirs[:5]}"

    summary = subprocess.run(
        [str(REPO_ROOT / "tools" / "summarize"), str(logs)], capture_output=True, text=True, cwd=tmp_path
    )
    assert summary.returncode == 0, summary.stderr
    assert run.parent.name in summary.stdout and "completed" in summary.stdout, summary.stdout


def test_the_twins_build_fails_where_the_data_helpers_are_broken(twin, tmp_path):
    """The Dockerfile's check, exactly as written there, run after the helpers are replaced by a
    module whose build_sample_idx segfaults: the build stops, naming the helpers."""
    (check,) = [
        item["value"]
        for item in DockerfileParser(str(REPO_ROOT / "Dockerfile")).structure
        if item["instruction"] == "RUN" and "check-data-helpers" in item["value"]
    ]
    (tmp_path / "helpers.py").write_text(SEGFAULTING_HELPERS)
    containerfile = tmp_path / "Containerfile"
    containerfile.write_text(
        f"FROM {twin.image}\n"
        "USER root\n"
        "COPY helpers.py /opt/Megatron-DeepSpeed/megatron/data/helpers.py\n"
        "RUN rm /opt/Megatron-DeepSpeed/megatron/data/helpers.cpython-*.so\n"
        f"RUN {check}\n"
    )
    flags = ["--format", "docker", *run_flags(twin.tool)] if twin.tool == "podman" else []
    result = subprocess.run(
        [twin.tool, "build", *flags, "--file", str(containerfile), "--tag", BROKEN_IMAGE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "build_sample_idx killed by SIGSEGV" in output, output[-3000:]
    assert "fix the build instead" in output, output[-3000:]
