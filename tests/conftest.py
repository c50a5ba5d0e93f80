"""Shared fixtures, and the test tiers (tests/README.md): tests/unit/ runs without the engine,
tests/engine/ needs the real engine (`make setup`), tests/cluster/ a two-node cluster. Every test
under tests/engine/, and every test that uses the `engine` fixture (which skips, with the reason,
when Megatron-DeepSpeed and its environment are not set up), is marked `real_engine`
(pyproject.toml registers the markers), so `pytest -m "not real_engine"` still leaves them out. A
unit test that asks for the engine, directly or through another fixture, fails the collection."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from engine_runs import SHARED_RUNS, Trained, held_out_probe, read_trained, train
from filelock import FileLock, Timeout
from prep_helpers import train_sentencepiece

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.cli import main
from zerolab.contracts import RANDOM_GPT2_MODULE
from zerolab.engine.paths import engine_dir, engine_missing, engine_python, engine_python_env, zerolab_on_path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOLLY_SAMPLE = REPO_ROOT / "data_prep" / "samples" / "dolly151.jsonl"
UNIT_TIER = REPO_ROOT / "tests" / "unit"
ENGINE_TIER = REPO_ROOT / "tests" / "engine"
CLUSTER_TIER = REPO_ROOT / "tests" / "cluster"


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
    items.sort(key=tier_rank)


def tier_rank(item: pytest.Item) -> int:
    """The tiers in the order the xdist workers take their files (`--dist loadfile
    --no-loadscope-reorder` keeps this order): the cluster's (mostly waiting on SLURM), then the
    engine's (minutes each), then the unit tests' many short files, which fill in wherever one
    worker finishes its engine files before the other."""
    where = item.path.resolve().parents
    return 0 if CLUSTER_TIER in where else 1 if ENGINE_TIER in where else 2


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


def _made_once_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """made_once's folder `name`, in the session's temporary folder that every worker's lies in."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' folders lie in the session's
    return root / "made-once" / name


@contextlib.contextmanager
def made_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A folder made once per test session and shared by its pytest-xdist workers (`make test` runs
    two), locked while the caller looks at it and fills it: yields (folder, whether it was made
    before). A folder whose filling failed is emptied for the next caller."""
    folder = _made_once_folder(tmp_path_factory, name)
    folder.parent.mkdir(exist_ok=True)
    made = folder / ".made"
    with FileLock(f"{folder}.lock"):
        if folder.exists() and not made.exists():
            shutil.rmtree(folder)
        was_made = made.exists()
        folder.mkdir(exist_ok=True)
        yield folder, was_made
        made.touch()


def being_made(tmp_path_factory: pytest.TempPathFactory, name: str) -> bool:
    """Whether another worker is filling made_once's folder `name` at this moment."""
    lock = FileLock(f"{_made_once_folder(tmp_path_factory, name)}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> str:
    """The bundled dolly sample, prepared by `zerolab prep` into a temporary directory: the
    Megatron data prefix. Each pytest-xdist worker has its own: Megatron writes its index cache
    beside the data, and two launches building the same cache at once would read each other's
    half-written files."""
    out = tmp_path_factory.mktemp("data") / "dolly"
    assert main(["prep", "dolly", "--input", str(DOLLY_SAMPLE), "--out", str(out), "--quiet"]) == 0
    return f"{out}_text_document"


@pytest.fixture(scope="session")
def sentencepiece_dataset(tmp_path_factory) -> tuple[Path, str]:
    """A SentencePiece model of 1,000 pieces trained on the bundled dolly sample, and the sample
    prepared with it by `zerolab prep --tokenizer-model` (each worker its own, as `dataset`): the
    model file and the Megatron data prefix."""
    folder = tmp_path_factory.mktemp("sentencepiece")
    model = train_sentencepiece(folder)
    out = folder / "dolly"
    argv = ["prep", "dolly", "--input", str(DOLLY_SAMPLE), "--out", str(out), "--tokenizer-model", str(model)]
    assert main([*argv, "--quiet"]) == 0
    return model, f"{out}_text_document"


@pytest.fixture(scope="session")
def split_dataset(tmp_path_factory) -> dict[str, str]:
    """The bundled dolly sample dealt by `zerolab prep --split 90,10,0`: the train and valid
    Megatron data prefixes (each worker its own, as `dataset`)."""
    out = tmp_path_factory.mktemp("data") / "dolly"
    argv = ["prep", "dolly", "--input", str(DOLLY_SAMPLE), "--out", str(out), "--split", "90,10,0", "--quiet"]
    assert main(argv) == 0
    return {split: f"{out}_{split}_text_document" for split in ("train", "valid")}


@pytest.fixture(scope="session")
def trained(engine, dataset, tmp_path_factory) -> Callable[[str], Trained]:
    """`trained(NAME)`: the run engine_runs.SHARED_RUNS names, trained on first use and shared by
    every test of the session, on every worker (3 iterations, a checkpoint at the end, the engine's
    forward pass of those final weights on held-out tokens in its `probe` folder)."""
    done: dict[str, Trained] = {}

    def get(name: str) -> Trained:
        if name not in done:
            with made_once(tmp_path_factory, f"run-{name}") as (folder, made):
                if made:
                    done[name] = read_trained(folder / name, folder / "probe")
                else:
                    recipe, *overrides = SHARED_RUNS[name]
                    probe = held_out_probe(dataset, folder / "probe")
                    done[name] = train(dataset, folder / name, recipe, *overrides, probe=probe)
        return done[name]

    def each(names: Iterable[str]) -> None:
        """Every run of `names`, those no other worker is training first: a worker waits for the
        other only when nothing is left for it to train."""
        left = [name for name in names if name not in done]
        while left:
            name = next((name for name in left if not being_made(tmp_path_factory, f"run-{name}")), left[0])
            get(name)
            left.remove(name)

    get.each = each  # type: ignore[attr-defined]
    return get


@pytest.fixture(scope="session")
def hf_model(engine, tmp_path_factory) -> Path:
    """A tiny GPT-2 (2 layers, hidden 64, the recipes' gpt2-tiny shape) that transformers made with
    random weights and saved with the bundled GPT-2 tokenizer (tokenizer.json only, as transformers 5
    saves it). Read only: tests that change it change a copy."""
    with made_once(tmp_path_factory, "hf") as (folder, made):
        if not made:
            shape = ["--layers", "2", "--hidden", "64", "--heads", "4", "--positions", "128"]
            tokenizer = ["--tokenizer", str(GPT2_VOCAB), str(GPT2_MERGES)]
            out = ["--out", str(folder / "tiny-gpt2")]
            command = [str(engine[1]), "-m", RANDOM_GPT2_MODULE, *shape, *tokenizer, *out]
            subprocess.run(
                command,
                env=engine_python_env() | zerolab_on_path(),
                check=True,
                capture_output=True,
                timeout=300,
            )
    return folder / "tiny-gpt2"


@pytest.fixture
def no_hub(tmp_path) -> dict[str, str]:
    """An environment whose Hugging Face hub cannot be reached (nothing listens on its port) and whose
    Hugging Face cache is empty: a machine without network, as far as the hub goes."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    return env | {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf-home")}
