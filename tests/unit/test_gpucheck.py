"""The GPU check without a GPU and without the engine: its refusals (bad options, an engine
environment it did not make), what its kit leaves out, the fewest iterations it takes, the working
tree a lent machine carries, and what it and the engine set-up do with the machine's own CUDA
builds. Its kit gathered for real and its dry run: tests/engine/test_gpucheck_engine.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_helpers import git

from zerolab.engine import cuda
from zerolab.engine.container import kept_builds
from zerolab.gpucheck import kit as kits
from zerolab.gpucheck.__main__ import main
from zerolab.gpucheck.check import (
    MIN_ITERS,
    SEED_RECIPE,
)
from zerolab.recipe.compose import load_recipe


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "seeds,warmup"], "no step warmup"),
        (["--iters", "12"], "--iters 12: at least 20"),
        (["--budget", "0"], "--budget 0: the check's wall time in seconds, more than 0"),
        (["--kit", "/nonexistent/kit"], "/nonexistent/kit/kit.json: not found"),
    ],
)
def test_bad_options_exit_2_with_the_reason(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path))
    assert main([*args, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--results", "{file}"], "--results: {file} is a file, where the results folder goes"),
        (["--work", "{file}/check"], "--work: {file} is a file, where the check's folder goes"),
        (["--data", "{tmp}/dolly"], "--data {tmp}/dolly: {tmp}/dolly.idx: No such file or directory"),
    ],
)
def test_paths_that_every_step_would_fail_on_are_refused_before_the_first(
    args, message, tmp_path, monkeypatch, capsys
):
    """Not a check that prints ok and fails minutes in (--data: each step; --results: the report)."""
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path))
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    assert main([*(arg.format(file=file, tmp=tmp_path) for arg in args), "--dry-run"]) == 2
    error = capsys.readouterr().err
    assert message.format(file=file, tmp=tmp_path) in error and "Traceback" not in error
    assert file.read_text() == "mine\n"


def test_the_fewest_iterations_the_check_takes_outlast_the_seed_recipes_warm_up():
    # --iters 10 was taken, then every seed run refused (warm-up of 10 iterations; H200, 2026-11-25)
    seed = load_recipe(SEED_RECIPE, [f"train.iters={MIN_ITERS}"])
    assert seed.train.lr_warmup_iters < MIN_ITERS


def test_an_engine_environment_the_check_did_not_make_is_refused(tmp_path, monkeypatch, capsys):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path))
    assert main(["--dry-run"]) == 2
    assert "ZEROLAB_HOME set to another folder" in capsys.readouterr().err


def test_what_the_kit_leaves_out():
    wheels = [Path("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl"), Path("rich-15.0.0-py3-none-any.whl"),
              Path("six-1.17.0-py2.py3-none-any.whl"), Path("hjson-3.1.0-py3-none-any.whl")]  # fmt: skip
    machine = kits.parse_freeze("numpy==2.5.2\nsix==1.17.0\nRich==13.9.4\n-e git+x#egg=y\n")
    dropped = kits.left_out(wheels, {"numpy", "six"}, machine)
    assert dropped == {
        "rich-15.0.0-py3-none-any.whl": "the machine has rich 13.9.4",
        "six-1.17.0-py2.py3-none-any.whl": "the machine has six 1.17.0, the pinned version",
    }


def test_the_machines_own_cuda_torch_is_kept_its_cpu_torch_is_not():
    assert kept_builds(None, "13.0") == ("torch",)
    assert kept_builds("nvcr.io/nvidia/pytorch:25.06-py3", None) == ("torch",)
    assert kept_builds(None, None) == ()


def test_a_pip_installed_toolkit_is_found_and_its_libraries_get_link_names(tmp_path):
    """The layout NVIDIA's CUDA 13 wheels install (nvidia/cu13/{bin,lib}), laid out here."""
    venv = tmp_path / "venv"
    toolkit = venv / "lib" / "python3.12" / "site-packages" / "nvidia" / "cu13"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "lib").mkdir()
    (toolkit / "bin" / "nvcc").write_text("")
    for name in ("libcudart.so.13", "libcublas.so.13", "libnvrtc.so.13", "libcufft.so.12", "libnvvm.so.4"):
        (toolkit / "lib" / name).write_text("")
    (toolkit / "lib" / "libnvvm.so").write_text("")
    python = venv / "bin" / "python"
    assert cuda.toolkit_home(python, {}) == toolkit
    assert cuda.toolkit_home(python, {"CUDA_HOME": "/usr/local/cuda"}) is None
    assert cuda.toolkit_home(tmp_path / "other" / "bin" / "python", {}) is None
    links = tmp_path / "links"
    assert cuda.link_libraries(toolkit, links) == [
        "libcublas.so",
        "libcudart.so",
        "libcufft.so",
        "libnvrtc.so",
    ]
    assert (links / "libcudart.so").resolve() == toolkit / "lib" / "libcudart.so.13"
    assert cuda.link_libraries(toolkit, links) == [
        "libcublas.so",
        "libcudart.so",
        "libcufft.so",
        "libnvrtc.so",
    ]


def test_the_working_tree_a_lent_machine_carries_leaves_ignored_files_out(tmp_path):
    git("init", "-q", cwd=tmp_path)
    (tmp_path / ".gitignore").write_text("/kit/\n")
    (tmp_path / "tracked").write_bytes(b"x" * 2**20)
    git("add", "tracked", ".gitignore", cwd=tmp_path)
    (tmp_path / "untracked").write_bytes(b"y" * 2**20)
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "wheel.whl").write_bytes(b"z" * 2**22)
    assert round(kits.working_tree_mib(tmp_path), 3) == 2.0  # the kit is carried by name, not as tree


def test_a_kit_inside_the_checkout_and_not_ignored_counts_once(tmp_path):
    """The kit's size line counts the tree less the kit, then the kit: 56 MiB that travel once were
    "97.0 MiB, OVER" when a kit inside the checkout was counted as tree and as kit."""
    git("init", "-q", cwd=tmp_path)
    (tmp_path / "tracked").write_bytes(b"x" * 2**20)
    git("add", "tracked", cwd=tmp_path)
    (tmp_path / ".gpu-kit").mkdir()
    (tmp_path / ".gpu-kit" / "wheel.whl").write_bytes(b"z" * 2**22)
    assert round(kits.working_tree_mib(tmp_path), 3) == 5.0  # git would carry the kit as tree
    tree = kits.working_tree_mib(tmp_path, besides=tmp_path / ".gpu-kit")
    assert round(tree + kits.size_mib(tmp_path / ".gpu-kit"), 3) == 5.0
