"""benchmarks/gpu_vs_peer.py: on CPU with the tiny model (the real engine and the real peer, a few
iterations each) it writes the report's lines from `zerolab summarize`'s numbers, with the profile
of zerolab's training steps; its target judgement, which needs a GPU's numbers, on given ones.
The GPU measurement itself is run by hand (benchmarks/gpu.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from benchmark_helpers import load_benchmark

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_vs_peer.py"
LINE = re.compile(
    r"- gpt2-tiny micro 4, ZeRO-0: zerolab ([\d,]+) tokens/s \(MFU n/a, [\d.]+ GiB\), "
    r"peer ([\d,]+) tokens/s \(MFU n/a, memory n/a\), ratio: (\d+\.\d\d)"
)


def benchmark_module():
    return load_benchmark("gpu_vs_peer")


def test_both_sides_run_on_cpu_into_the_report(engine, dataset, tmp_path):
    out, work = tmp_path / "gpu.md", tmp_path / "work"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--zero", "0", "--iters", "3",
               "--peer-steps", "1", "--peer-warmup-steps", "1", "--profile", "all", "--data", dataset,
               "--work", str(work), "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = out.read_text()
    (line,) = [line for line in report.splitlines() if line.startswith("- gpt2-tiny")]
    match = LINE.fullmatch(line)
    assert match, line
    zerolab_rate, peer_rate, ratio = (float(group.replace(",", "")) for group in match.groups())
    (row,) = json.loads((work / "runs" / "gpt2-tiny-z0-summary" / "summary.json").read_text())["runs"]
    assert zerolab_rate == round(row["tokens_per_s_per_gpu"])  # zerolab summarize's number
    assert (row["world_size"], row["micro_batch_size"], row["global_batch_size"]) == (1, 4, 8)
    peer = json.loads((work / "peer" / "tiny.log").read_text().splitlines()[-1])
    assert peer_rate == peer["tokens_per_s"] and peer["device"] == "cpu"
    assert abs(ratio - row["tokens_per_s_per_gpu"] / peer["tokens_per_s"]) <= 0.005
    assert "device **cpu**" in report and "none judged: the targets are for one GPU" in report
    assert "### gpt2-tiny micro 4, ZeRO-0 (profiled on request)" in report
    assert "# training steps 3-5 of rank 0, top 25 by self cpu time" in report and "aten::mm" in report
    measured = (work / "runs" / "gpt2-tiny-z0" / "train.log").read_text()
    assert "zerolab: patch sdpa_attention" in measured  # the recipe's attention
    assert "zerolab: patch profile_training_steps" not in measured  # only the profile run


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
