"""benchmarks/gpu_vs_peer.py on CPU with the tiny model (the real engine and the real peer, a few
iterations each): it writes the report's lines from `zerolab summarize`'s numbers, with the profile of
zerolab's training steps. Its target judgement: tests/unit/test_benchmark_gpu_vs_peer.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_vs_peer.py"
LINE = re.compile(
    r"- gpt2-tiny micro 4, ZeRO-0: zerolab ([\d,]+) tokens/s \(MFU n/a, [\d.]+ GiB\), "
    r"peer ([\d,]+) tokens/s \(MFU n/a, memory n/a\), ratio: (\d+\.\d\d)"
)


def test_both_sides_run_on_cpu_into_the_report(engine, dataset, tmp_path):
    out, work = tmp_path / "gpu.md", tmp_path / "work"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--cases", "tiny:0", "fsdp2/tiny:3",
               "--iters", "3", "--peer-steps", "1", "--peer-warmup-steps", "1", "--profile", "all",
               "--data", dataset, "--work", str(work), "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = out.read_text()
    line, fsdp2 = [line for line in report.splitlines() if line.startswith("- gpt2-tiny")]
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
    # the second engine's twin of the seed recipe, beside the engine's, against the same peer
    assert (
        fsdp2.startswith("- gpt2-tiny micro 4, FSDP2 z3 (resharded): zerolab ")
        and f"peer {match[2]}" in fsdp2
    )
    (twin,) = json.loads((work / "runs" / "gpt2-tiny-fsdp2-z3-summary" / "summary.json").read_text())["runs"]
    assert twin["engine"] == "fsdp2" and twin["world_size"] == 1 and twin["status"] == "completed"
    assert "gpt2_fsdp2_z3" in report and "### gpt2-tiny micro 4, FSDP2" not in report  # not profiled
    assert len(list((work / "peer").glob("*.log"))) == 1  # one peer per size
