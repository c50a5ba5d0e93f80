"""benchmarks/rank_startup.py without the engine: the environment its measuring processes start
from (tests/engine/test_benchmark_rank_startup_engine.py measures with the engine)."""

from __future__ import annotations

from benchmark_helpers import load_benchmark

from zerolab.contracts import ATTENTION_ENV, SPEED_ENV


def test_the_measuring_process_keeps_zerolabs_locations_and_drops_the_opt_in_patches(monkeypatch, tmp_path):
    # a user whose engine is not in the default place (ZEROLAB_HOME) measures that engine, and a
    # launch's speed switches or attention patch in the caller's environment are no row's
    rank_startup = load_benchmark("rank_startup")
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path))
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", str(tmp_path / "engine"))
    monkeypatch.setenv(SPEED_ENV, "manual_gc")
    monkeypatch.setenv(ATTENTION_ENV, "sdpa")

    env = rank_startup.measuring_env()

    assert (env["ZEROLAB_HOME"], env["ZEROLAB_ENGINE_DIR"]) == (str(tmp_path), str(tmp_path / "engine"))
    assert SPEED_ENV not in env and ATTENTION_ENV not in env
    assert env["DS_ACCELERATOR"] == "cpu"
