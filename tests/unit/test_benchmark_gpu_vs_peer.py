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
    cases = module.parse_cases(["1.5b:0,2", "124m:0"], module.GPU_SIZES)
    assert [(size.model, zeros) for size, zeros in cases] == [("gpt2-1.5b", [0, 2]), ("gpt2-124m", [0])]
    for bad in ("1.5b", "2b:0", "124m:3", "124m:x"):
        with pytest.raises(SystemExit, match=r"--cases .*give SIZE:STAGES.*e\.g\. 1\.5b:0,2"):
            module.parse_cases([bad], module.GPU_SIZES)
