"""model.attention=sdpa trains the tiny GPT-2 on the real engine (CPU, 2 ranks over gloo, no
dropout) to the loss of the engine's own attention, iteration by iteration: with micro batch 2
(the strided q/k/v of several sequences) and with tensor parallel 2 (each rank half the heads).
Skipped, with the reason, when the engine is not set up (`make setup`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_helpers import free_port

from zerolab.cli import main
from zerolab.logs.parse import parse_log

ITERATIONS = 20
CASES = {
    "micro batch 2, data parallel 2": [],
    "tensor parallel 2, micro batch 2": ["parallel.tensor=2", "train.global_batch_size=4"],
}


def train(dataset: str, run_dir: Path, attention: str, overrides: list[str]) -> Path:
    """train.log of tiny_dp trained with `attention` for ITERATIONS iterations (or as overridden)."""
    code = main(
        [
            "launch",
            "cpu/tiny_dp",
            f"data.path={dataset}",
            f"model.attention={attention}",
            "model.attention_dropout=0",
            "model.hidden_dropout=0",
            f"train.iters={ITERATIONS}",
            "train.log_interval=1",
            f"hardware.master_port={free_port()}",
            *overrides,
            "--run-dir",
            str(run_dir),
        ]
    )
    assert code == 0, f"{attention}: exit code {code}"
    return run_dir / "train.log"


@pytest.mark.parametrize("overrides", list(CASES.values()), ids=list(CASES))
def test_sdpa_trains_to_the_loss_of_the_engines_attention(engine, dataset, tmp_path, overrides):
    megatron = train(dataset, tmp_path / "megatron", "megatron", overrides)
    sdpa = train(dataset, tmp_path / "sdpa", "sdpa", overrides)
    assert "zerolab: patch sdpa_attention" in sdpa.read_text()
    assert "zerolab: patch sdpa_attention" not in megatron.read_text()
    expected, got = (parse_log(log).iterations for log in (megatron, sdpa))
    assert list(expected["iteration"]) == list(got["iteration"]) == [float(i + 1) for i in range(ITERATIONS)]
    differences = [abs(a - b) for a, b in zip(expected["loss"], got["loss"], strict=True)]
    assert max(differences) <= 1e-3, differences
    assert expected["loss"][-1] < expected["loss"][0] - 0.3  # it trained
