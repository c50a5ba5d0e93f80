"""benchmarks/gpu_vs_peer.py's target judgement, which needs a GPU's numbers, on given ones. The
script on CPU with the tiny model: tests/engine/test_benchmark_gpu_vs_peer_engine.py. The GPU
measurement itself is run by hand (benchmarks/gpu.md)."""

from __future__ import annotations

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
        case(module, "gpt2-124m", 0, 450_000, 470_000, 39.0),  # 0.96x: met
        case(module, "gpt2-124m", 2, 380_000, 470_000, 33.0),  # 0.84x ZeRO-0: missed
        case(module, "gpt2-1.5b", 0, 33_000, 38_622, 34.0),  # 0.85x and MFU 34%: both missed
        case(module, "gpt2-1.5b", 2, 32_000, 38_622, 34.0),  # 0.97x ZeRO-0: met
    ]
    lines = module.judge(cases, on_gpu=True)
    assert lines == [
        "met: zerolab >= 0.9x the peer's tokens/s, gpt2-124m micro 16, ZeRO-0 (0.96x)",
        "MISSED: ZeRO-2 within 10% of ZeRO-0, gpt2-124m micro 16, ZeRO-2 (0.84x ZeRO-0)",
        "MISSED: zerolab >= 0.9x the peer's tokens/s, gpt2-1.5b micro 4, ZeRO-0 (0.85x)",
        "MISSED: MFU >= 35%, gpt2-1.5b micro 4, ZeRO-0 (34.0%)",
        "met: ZeRO-2 within 10% of ZeRO-0, gpt2-1.5b micro 4, ZeRO-2 (0.97x ZeRO-0)",
    ]
    assert [len(c.missed) for c in cases] == [0, 1, 2, 0]  # the cases a missed run profiles
    assert module.judge(cases, on_gpu=True) == lines and [len(c.missed) for c in cases] == [0, 1, 2, 0]
    assert module.judge(cases[:1], on_gpu=False) == [
        "none judged: the targets are for one GPU; this run is on CPU"
    ]
