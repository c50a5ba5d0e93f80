"""zerolab installed as a wheel (`pip install .`, not editable) into a fresh environment and
run from other directories: the shipped recipes, building blocks, tokenizer and sample are
found in the package, and every path a user gives is relative to the current directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def zerolab_wheel_install(tmp_path_factory) -> Path:
    """A fresh virtual environment with zerolab pip-installed from a copy of this working tree;
    its dependencies come from the test's own environment (PYTHONPATH), not from the index."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if not (REPO / name).exists() and not (REPO / name).is_symlink():
            continue  # deleted in the working tree
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--no-deps", str(source)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    shutil.rmtree(source)  # nothing may come from the source tree any more
    return venv


def zerolab(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]  # the dependencies, not zerolab itself
    return subprocess.run(
        [str(venv / "bin" / "zerolab"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_installed_package_is_not_this_checkout(zerolab_wheel_install, tmp_path):
    probe = "import zerolab.locations as l; print(l.PACKAGE_DIR, l.CHECKOUT)"
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    out = subprocess.run(
        [str(zerolab_wheel_install / "bin" / "python"), "-c", probe],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert out[0].startswith(str(zerolab_wheel_install)) and out[1] == "None"


def test_shipped_recipes_render_from_any_directory(zerolab_wheel_install, tmp_path):
    result = zerolab(zerolab_wheel_install, tmp_path, "render", "gpt2_z1", "--json")
    assert result.returncode == 0, result.stderr
    argv = json.loads(result.stdout)["argv"]
    assert argv[argv.index("--data-path") + 1] == "data/dolly_text_document"
    for flag in ("--vocab-file", "--merge-file"):
        tokenizer_file = Path(argv[argv.index(flag) + 1])
        assert tokenizer_file.is_absolute() and tokenizer_file.is_file()
        assert str(tokenizer_file).startswith(str(zerolab_wheel_install))
    result = zerolab(zerolab_wheel_install, tmp_path, "render", "cpu/tiny_z3", "model=gpt2-124m", "zero=z1")
    assert result.returncode == 0, result.stderr
    assert "zerolab: warning: data.path: data/dolly-sample_text_document.bin" in result.stderr


def test_a_users_recipe_and_data_are_relative_to_the_current_directory(zerolab_wheel_install, tmp_path):
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "recipes" / "mine.yaml").write_text(
        "description: my tiny run\n"
        "base: [model/gpt2-tiny, data/dolly-sample, precision/fp32, hardware/cpu-2ranks, train/tiny-demo,"
        " zero/z1]\n"
        "data: {path: data/mine_text_document}\n"
    )
    sample = zerolab_wheel_install / "lib"  # the shipped dolly sample, inside the installed package
    (sample,) = sample.glob("python3*/site-packages/zerolab/shipped/samples/dolly151.jsonl")
    prepared = zerolab(zerolab_wheel_install, project, "prep", "dolly", "--input", str(sample),
                       "--out", "data/mine", "--quiet")  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr
    assert (project / "data" / "mine_text_document.bin").is_file()

    here = zerolab(zerolab_wheel_install, project, "launch", "recipes/mine.yaml", "--dry-run")
    assert here.returncode == 0, here.stderr
    assert "warning" not in here.stderr
    assert "# recipes/mine.yaml: my tiny run" in here.stdout

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    there = zerolab(zerolab_wheel_install, elsewhere, "render", str(project / "recipes" / "mine.yaml"))
    assert there.returncode == 0, there.stderr
    warning = "warning: data.path: data/mine_text_document.bin and data/mine_text_document.idx not found"
    assert warning in there.stderr
    missing = zerolab(zerolab_wheel_install, elsewhere, "render", "recipes/mine.yaml")
    assert missing.returncode == 2 and "recipes/mine.yaml: no such recipe file" in missing.stderr
