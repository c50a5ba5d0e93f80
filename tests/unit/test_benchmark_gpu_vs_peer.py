"""benchmarks/gpu_vs_peer.py's target judgement, which needs a GPU's numbers, on given ones. The
script on CPU with the tiny model: tests/engine/test_benchmark_gpu_vs_peer_engine.py. The GPU
measurement itself is run by hand (benchmarks/gpu.md)."""

from __future__ import annotations

import pytest
from benchmark_helpers import load_benchmark


def benchmark_module():
    return load_benchmark("gpu_vs_peer")


def case(module, model: str, zero: int, zerolab_rate: float, peer_rate: float, mfu: float):
    size = next(size for size in module.GPU_SIZES if size.model == model)
    row = {"tokens_per_s_per_gpu": zerolab_rate, "mfu_pct": mfu}
    return module.Case(size, zero, {"tokens_per_s": peer_rate}, row)


def test_targets_are_judged_as_the_issue_states_them():
    module = benchmark_module()
    cases = [
        case(module, "gpt2-1.5b", 0, 40_000, 38_622, 41.0),  # 1.04x and MFU 41%: both met
        case(module, "gpt2-1.5b", 2, 35_000, 38_622, 36.0),  # 0.88x ZeRO-0: missed
        case(module, "gpt2-124m", 0, 390_000, 511_620, 30.0),  # 0.76x: missed
        case(module, "gpt2-124m", 1, 380_000, 511_620, 29.0),  # 0.97x ZeRO-0: met
    ]
    lines = module.judge(cases, on_gpu=True)
    assert lines == [
        "met: zerolab >= 1.0x the peer's tokens/s, gpt2-1.5b micro 4, ZeRO-0 (1.04x)",
        "met: MFU >= 40%, gpt2-1.5b micro 4, ZeRO-0 (41.0%)",
        "MISSED: ZeRO-2 within 10% of ZeRO-0, gpt2-1.5b micro 4, ZeRO-2 (0.88x ZeRO-0)",
        "MISSED: zerolab >= 0.8x the peer's tokens/s, gpt2-124m micro 16, ZeRO-0 (0.76x)",
        "met: ZeRO-1 within 10% of ZeRO-0, gpt2-124m micro 16, ZeRO-1 (0.97x ZeRO-0)",
    ]
    assert [len(c.missed) for c in cases] == [0, 1, 1, 0]  # the cases a missed run profiles
    assert module.judge(cases, on_gpu=True) == lines and [len(c.missed) for c in cases] == [0, 1, 1, 0]
    assert module.judge(cases[:1], on_gpu=False) == [
        "none judged: the targets are for one GPU; this run is on CPU"
    ]


def test_the_cases_run_in_the_order_given_and_a_bad_one_is_refused_with_the_form():
    module = benchmark_module()
    cases = module.parse_cases(["1.5b:0,2", "124m:0", "fsdp2/124m:0,2,3"], module.GPU_SIZES)
    assert [(size.model, engine, zeros) for size, engine, zeros in cases] == [
        ("gpt2-1.5b", "megatron-deepspeed", [0, 2]),
        ("gpt2-124m", "megatron-deepspeed", [0]),
        ("gpt2-124m", "fsdp2", [0, 2, 3]),
    ]
    for bad in ("1.5b", "2b:0", "124m:3", "124m:x", "fsdp2/124m:1", "fsdp3/124m:0"):
        with pytest.raises(SystemExit, match=r"--cases .*give \[fsdp2/\]SIZE:STAGES.*e\.g\. 1\.5b:0,2"):
            module.parse_cases([bad], module.GPU_SIZES)


def test_fsdp2_cases_run_their_twin_recipes_beside_the_engine_and_are_not_judged():
    module = benchmark_module()
    engine = case(module, "gpt2-124m", 0, 390_000, 511_620, 30.0)
    fsdp2 = module.Case(engine.size, 3, engine.peer, {"tokens_per_s_per_gpu": 300_000}, engine="fsdp2")
    assert (fsdp2.recipe, fsdp2.label) == ("gpt2_fsdp2_z3", "gpt2-124m-fsdp2-z3")
    assert (engine.recipe, engine.label) == ("gpt2_dp", "gpt2-124m-z0")
    lines = module.judge([engine, fsdp2], on_gpu=True)
    assert lines[-1] == (
        "not judged: gpt2-124m micro 16, FSDP2 z3 (resharded) "
        "(the second engine, beside the engine; no target)"
    )
    assert fsdp2.missed == [] and len(engine.missed) == 1  # only the engine's ZeRO-0 misses its 0.8x
