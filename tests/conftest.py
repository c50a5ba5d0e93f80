"""Shared fixtures, and the test tiers (tests/README.md): tests/unit/ runs without the engine,
tests/engine/ needs the real engine (`make setup`), tests/cluster/ a two-node cluster. Every test
under tests/engine/, and every test that uses the `engine` fixture (which skips, with the reason,
when Megatron-DeepSpeed and its environment are not set up), is marked `real_engine`
(pyproject.toml registers the markers), so `pytest -m "not real_engine"` still leaves them out. A
unit test that asks for the engine, directly or through another fixture, fails the collection."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from engine_runs import SHARED_RUNS, Trained, held_out_probe, train

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.cli import main
from zerolab.contracts import RANDOM_GPT2_MODULE
from zerolab.engine.paths import engine_dir, engine_missing, engine_python, engine_python_env

REPO_ROOT = Path(__file__).resolve().parents[1]
DOLLY_SAMPLE = REPO_ROOT / "data_prep" / "samples" / "dolly151.jsonl"
UNIT_TIER = REPO_ROOT / "tests" / "unit"
ENGINE_TIER = REPO_ROOT / "tests" / "engine"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every engine-tier test and every test that asks for the real engine, directly or through
    another fixture; refuse a unit test that asks for it."""
    misplaced = []
    for item in items:
        uses_engine = "engine" in getattr(item, "fixturenames", ())
        where = item.path.resolve().parents
        if uses_engine or ENGINE_TIER in where:
            item.add_marker(pytest.mark.real_engine)
        if uses_engine and UNIT_TIER in where:
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(
            "these tests in tests/unit/ use the engine fixture, directly or through another fixture; "
            "tests that need the engine go in tests/engine/ (tests/README.md):\n  " + "\n  ".join(misplaced)
        )


@pytest.fixture
def repo_root() -> Path:
    """The repository's root directory."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def engine() -> tuple[Path, Path]:
    """(Megatron-DeepSpeed checkout, engine Python); skips the test when absent."""
    reason = engine_missing()
    if reason:
        pytest.skip(f"engine not set up: {reason}")
    return engine_dir(), engine_python()


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> str:
    """The bundled dolly sample, prepared by `zerolab prep` into a temporary directory: the
    Megatron data prefix."""
    out = tmp_path_factory.mktemp("data") / "dolly"
    assert main(["prep", "dolly", "--input", str(DOLLY_SAMPLE), "--out", str(out), "--quiet"]) == 0
    return f"{out}_text_document"


@pytest.fixture(scope="session")
def split_dataset(tmp_path_factory) -> dict[str, str]:
    """The bundled dolly sample dealt by `zerolab prep --split 90,10,0`: the train and valid
    Megatron data prefixes."""
    out = tmp_path_factory.mktemp("data") / "dolly"
    argv = ["prep", "dolly", "--input", str(DOLLY_SAMPLE), "--out", str(out), "--split", "90,10,0", "--quiet"]
    assert main(argv) == 0
    return {split: f"{out}_{split}_text_document" for split in ("train", "valid")}


@pytest.fixture(scope="session")
def trained(engine, dataset, tmp_path_factory) -> Callable[[str], Trained]:
    """`trained(NAME)`: the run engine_runs.SHARED_RUNS names, trained on first use and shared by
    every test of the session (3 iterations, a checkpoint at the end, the engine's forward pass of
    those final weights on held-out tokens in its `probe` folder)."""
    done: dict[str, Trained] = {}

    def get(name: str) -> Trained:
        if name not in done:
            recipe, *overrides = SHARED_RUNS[name]
            runs = tmp_path_factory.mktemp("runs")
            probe = held_out_probe(dataset, runs / "probe")
            done[name] = train(dataset, runs / name, recipe, *overrides, probe=probe)
        return done[name]

    return get


@pytest.fixture(scope="session")
def hf_model(engine, tmp_path_factory) -> Path:
    """A tiny GPT-2 (2 layers, hidden 64, the recipes' gpt2-tiny shape) that transformers made with
    random weights and saved with the bundled GPT-2 tokenizer (tokenizer.json only, as transformers 5
    saves it). Read only: tests that change it change a copy."""
    folder = tmp_path_factory.mktemp("hf") / "tiny-gpt2"
    shape = ["--layers", "2", "--hidden", "64", "--heads", "4", "--positions", "128"]
    tokenizer = ["--tokenizer", str(GPT2_VOCAB), str(GPT2_MERGES)]
    command = [str(engine[1]), "-m", RANDOM_GPT2_MODULE, *shape, *tokenizer, "--out", str(folder)]
    subprocess.run(command, env=engine_python_env(), check=True, capture_output=True, timeout=300)
    return folder


@pytest.fixture
def no_hub(tmp_path) -> dict[str, str]:
    """An environment whose Hugging Face hub cannot be reached (nothing listens on its port) and whose
    Hugging Face cache is empty: a machine without network, as far as the hub goes."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    return env | {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf-home")}
