"""The image definition, checked without a container engine: the Dockerfile as dockerfile-parse
reads it, .dockerignore, the entrypoint, and the pins it installs. tests/container/ builds its CPU
twin and runs it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from container_helpers import PODMAN_FLAGS, SHM_SIZE
from dockerfile_parse import DockerfileParser

from zerolab.engine.install import BUILD
from zerolab.engine.pins import load_pins

REPO_ROOT = Path(__file__).resolve().parents[2]
PINNED_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!-]*$")


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(str(REPO_ROOT / "Dockerfile"))


def instructions(dockerfile: DockerfileParser, kind: str) -> list[tuple[int, str]]:
    """(position, value) of every instruction of one kind, in order."""
    return [
        (index, item["value"])
        for index, item in enumerate(dockerfile.structure)
        if item["instruction"] == kind
    ]


def pip_installs(dockerfile: DockerfileParser) -> list[list[str]]:
    """The arguments after `pip install` of every pip call in every RUN."""
    calls = []
    for _, command in instructions(dockerfile, "RUN"):
        for part in re.split(r"&&|;|\|\|", command):
            words = shlex.split(part)
            for i in range(len(words) - 1):
                if words[i] in ("pip", "pip3") and words[i + 1] == "install":
                    calls.append(words[i + 2 :])
    return calls


def test_base_image_is_ngc_pytorch_pinned_by_tag_and_digest(dockerfile):
    assert re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3@sha256:[0-9a-f]{64}", dockerfile.baseimage)


def test_every_pip_install_is_pinned(dockerfile):
    calls = pip_installs(dockerfile)
    assert len(calls) >= 2
    for args in calls:
        requirement_files = [args[i + 1] for i, word in enumerate(args) if word in ("-r", "-c")]
        packages = [
            word
            for i, word in enumerate(args)
            if not word.startswith("-") and (i == 0 or args[i - 1] not in ("-r", "-c", "-e"))
        ]
        editable = [args[i + 1] for i, word in enumerate(args) if word == "-e"]
        for package in packages:
            assert PINNED_LINE.match(package), f"unpinned pip install argument: {package}"
        for path in editable:
            assert path == "." and "--no-deps" in args, f"-e {path} must be the project, with --no-deps"
        for name in requirement_files:
            assert name in (
                "requirements-engine.txt",
                "requirements/zerolab.txt",
                "constraints-engine.txt",
            ), name
        assert packages or requirement_files or editable


def test_the_image_installs_the_locks(dockerfile):
    """zerolab's dependencies at requirements/zerolab.txt's versions, and what the engine's pins need
    at requirements/engine.txt's (the constraints `make setup`'s pip has; tests/unit/test_locks.py)."""
    assert (
        "COPY requirements/engine.txt requirements/zerolab.txt /opt/zerolab-pins/requirements/"
        in dockerfile.content
    )
    (engine_install,) = [args for args in pip_installs(dockerfile) if "requirements-engine.txt" in args]
    assert "requirements/zerolab.txt" in engine_install
    assert engine_install[engine_install.index("-c") + 1] == "constraints-engine.txt"
    runs = " ".join(value for _, value in instructions(dockerfile, "RUN"))
    assert "python3 -m zerolab.engine.container constraints constraints-engine.txt" in runs


def test_one_dockerfile_for_both_accelerators(dockerfile):
    """ACCELERATOR=cuda (the default: the GPU image) or cpu (its twin); the CUDA-only steps are
    conditional on it, and DeepSpeed's ops are chosen by it (zerolab.engine.container)."""
    assert dockerfile.args["ACCELERATOR"] == "cuda"
    runs = [" ".join(value.split()) for _, value in instructions(dockerfile, "RUN")]
    for step in ("zerolab.engine.build apex", "zerolab.engine.build fused-kernels"):
        (run,) = [value for value in runs if step in value]
        condition = run.index('if [ "${ACCELERATOR}" = cuda ]; then')
        end = re.compile(r";\s*fi\b").search(run, run.index(step))
        assert end and condition < run.index(step) < end.start(), step
    (ops,) = [value for value in runs if "with-deepspeed-ops" in value]
    assert 'with-deepspeed-ops "${ACCELERATOR}" python3 -m pip install' in ops
    assert 'check-deepspeed-ops "${ACCELERATOR}"' in ops
    assert "DS_BUILD" not in dockerfile.content  # the ops are zerolab.engine.container's to name


def test_the_engine_can_come_from_a_local_git_directory(dockerfile):
    """ENGINE_SRC (default: the pinned upstream) is where the commit is fetched from; ENGINE_REPO
    stays the pinned identity the build checks."""
    assert dockerfile.args["ENGINE_SRC"] == "${ENGINE_REPO}"
    runs = " ".join(value for _, value in instructions(dockerfile, "RUN"))
    assert 'git fetch --quiet --depth 1 "${ENGINE_SRC}" "${ENGINE_COMMIT}"' in runs


def test_the_data_helpers_are_checked_by_the_images_zerolab_and_fail_the_build(dockerfile):
    """After zerolab is installed (the rank script imports it), the last RUN before USER: a failed
    check fails the build (tests/container/ breaks the helpers to see it)."""
    copies = instructions(dockerfile, "COPY")
    whole_tree = max(index for index, value in copies if re.search(r"(^|\s)\.\s", value + " "))
    (check,) = [
        (index, value) for index, value in instructions(dockerfile, "RUN") if "check-data-helpers" in value
    ]
    assert check[0] > whole_tree
    assert check[1] == f"python3 -m {BUILD_MODULE} check-data-helpers /opt/Megatron-DeepSpeed"


def test_engine_commit_is_the_pinned_one(dockerfile):
    pins = load_pins()
    assert dockerfile.args["ENGINE_COMMIT"] == pins.engine_commit
    assert dockerfile.args["ENGINE_REPO"] == pins.engine_repo


def test_engine_location_matches_the_engine_contract(dockerfile):
    env = dockerfile.envs
    assert env["ZEROLAB_ENGINE_DIR"] == "/opt/Megatron-DeepSpeed"
    assert env["ZEROLAB_ENGINE_PYTHON"].startswith("/")


def test_default_user_is_not_root(dockerfile):
    users = instructions(dockerfile, "USER")
    assert users, "the image must set a USER"
    user = users[-1][1].replace("${ZEROLAB_UID}", dockerfile.args["ZEROLAB_UID"])
    assert user not in ("root", "0") and not user.startswith("0:")


def test_code_is_copied_after_the_stack_is_installed(dockerfile):
    copies = instructions(dockerfile, "COPY")
    whole_tree = [index for index, value in copies if re.search(r"(^|\s)\.\s", value + " ")]
    assert len(whole_tree) == 1, "copy the source tree once, after the dependencies"
    heavy = [
        index
        for index, value in instructions(dockerfile, "RUN")
        if "-r requirements" in value or "git fetch" in value
    ]
    assert heavy and max(heavy) < whole_tree[0]


def test_logs_and_data_are_volumes(dockerfile):
    volumes = " ".join(value for _, value in instructions(dockerfile, "VOLUME"))
    assert "/workspace/zerolab/logs" in volumes and "/workspace/zerolab/data" in volumes


def test_dockerignore_keeps_runs_data_caches_and_environments_out():
    patterns = {
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"logs", "data", ".venv", ".git"} <= patterns
    assert "**/__pycache__" in patterns


def test_every_tracked_shell_script_is_executable():
    listing = subprocess.run(
        ["git", "ls-files", "-s", "--", "*.sh"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    scripts = {line.split("\t", 1)[1]: line.split()[0] for line in listing}
    assert "docker/entrypoint.sh" in scripts
    not_executable = [path for path, mode in scripts.items() if mode != "100755"]
    assert not not_executable, f"chmod +x (and git add) these: {not_executable}"


def test_entrypoint_gives_a_user_without_home_a_writable_one(tmp_path):
    env = {"PATH": os.environ["PATH"], "HOME": "/"}
    result = subprocess.run(
        [
            "bash",
            str(REPO_ROOT / "docker" / "entrypoint.sh"),
            sys.executable,
            "-c",
            "import os; print(os.environ['HOME'])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    home = Path(result.stdout.strip())
    assert home != Path("/") and os.access(home, os.W_OK)


def test_entrypoint_runs_the_command_and_passes_its_exit_status(tmp_path):
    script = tmp_path / "recipe.sh"
    script.write_text('#!/usr/bin/env bash\necho "ran $1"\nexit 3\n')
    script.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "docker" / "entrypoint.sh"), str(script), "gpt2_z1"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stdout) == (3, "ran gpt2_z1\n")


def test_compatibility_doc_names_the_image_the_dockerfile_builds_on(dockerfile):
    doc = (REPO_ROOT / "docs" / "compatibility.md").read_text()
    tag, digest = dockerfile.baseimage.split("@")
    assert f"`{tag}`" in doc and digest.removeprefix("sha256:") in doc
    assert load_pins().engine_commit in doc


BUILD_MODULE = "zerolab.engine.build"


def test_apex_helpers_and_fused_kernels_are_built_by_the_commands_make_setup_runs(dockerfile):

    assert BUILD == BUILD_MODULE
    runs = " ".join(value for _, value in instructions(dockerfile, "RUN"))
    for step in ("apex --workdir", "data-helpers .", "fused-kernels ."):
        assert f"python3 -m {BUILD_MODULE} {step}" in runs, step
    assert "make -C megatron/data" not in runs  # the helpers' own make needs python3-config


def module_file(name: str) -> str:
    """The repository path of module `name` (a package's __init__.py)."""
    path = Path(*name.split("."))
    return str(
        path.with_suffix(".py") if (REPO_ROOT / path.with_suffix(".py")).is_file() else path / "__init__.py"
    )


@pytest.mark.parametrize("build_module", [BUILD_MODULE, "zerolab.engine.container"])
def test_the_build_steps_have_every_module_they_import_copied_before_they_run(dockerfile, build_module):
    imported = subprocess.run(
        [sys.executable, "-c", f"import sys, {build_module}; print(*sys.modules)"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not {"rich", "pydantic", "yaml", "numpy", "torch"} & set(imported)  # standard library only
    needed = {module_file(name) for name in imported if name.split(".")[0] == "zerolab"}
    first_use = min(index for index, value in instructions(dockerfile, "RUN") if build_module in value)
    copied = {
        source
        for index, value in instructions(dockerfile, "COPY")
        if index < first_use
        for source in value.split()[:-1]
    }
    assert needed <= copied, f"COPY these before the build steps: {sorted(needed - copied)}"


def test_the_readme_and_the_build_script_use_the_container_tiers_flags():
    """What the container tier runs the twin with (tests/container_helpers.py) is what the README
    tells a user to type, and what docker/cpu-twin.sh builds with."""
    run = " ".join((*PODMAN_FLAGS, SHM_SIZE))
    assert f"podman run --rm {run} " in (REPO_ROOT / "README.md").read_text()
    assert run in (REPO_ROOT / "docs" / "gpu.md").read_text().replace(" \\\n    ", " ")
    script = (REPO_ROOT / "docker" / "cpu-twin.sh").read_text()
    assert " ".join(PODMAN_FLAGS[2:]) in script and "--runtime runc" in script
    assert '--file "$root/Dockerfile"' in script and "--build-arg ACCELERATOR=cpu" in script  # not a copy
