"""Training the tiny GPT-2 on the real engine for a test: `train` launches a recipe through
`zerolab launch` (3 iterations by default; the CPU recipes save a checkpoint at the end) and
reads what the run printed. SHARED_RUNS are trained once per session (conftest's `trained`) and
shared by the engine matrix, the export proof and the evaluation tests; each also runs the
engine's forward pass of its final weights on held-out tokens (the forward_probe patch), which
the export proof compares with."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from launch_helpers import default_port_in_use

from zerolab.cli import main
from zerolab.logs.config_dump import ConfigCollector
from zerolab.logs.lines import read_lines
from zerolab.logs.parse import ParsedLog, parse_log
from zerolab.rank.forward_probe import PROBE_ENV, TOKENS_FILE

ITERATIONS = 3
SEQ_LENGTH = 32
"""The context a test's short run trains at: a quarter of the tiny recipes' 128. The LM head over
GPT-2's 50,257 tokens is most of a tiny iteration's time, and no flag a short run proves depends on the
context. `make demo`, and the runs given short=False, train at the recipes' own."""
SHORT = [
    f"train.iters={ITERATIONS}",
    "train.lr_warmup_iters=1",
    "train.log_interval=1",
    f"model.seq_length={SEQ_LENGTH}",
]

SHARED_RUNS: dict[str, tuple[str, ...]] = {
    "z0": ("cpu/tiny_dp",),
    "z1": ("cpu/tiny_z1",),
    "z2": ("cpu/tiny_z2",),
    "z3": ("cpu/tiny_z3",),
    "z3_offload": ("cpu/tiny_z3_offload",),
    "z3_offload_param": ("cpu/tiny_z3_offload_param",),
    "tp2": ("cpu/tiny_z1", "parallel.tensor=2"),
    "pp2": ("cpu/tiny_dp", "parallel.pipeline=2"),
    "pp2_z1": ("cpu/tiny_z1", "parallel.pipeline=2", "activation_checkpointing=full"),
    "bf16": ("cpu/tiny_dp", "precision=bf16"),
}
"""Runs several test modules read: the five demo setups, ZeRO-3 with the weights offloaded, tensor
and pipeline parallel 2 (under ZeRO-1 with every layer recomputed), and bf16."""
DEMO_SETUPS = ("z0", "z1", "z2", "z3", "z3_offload")


@dataclass(frozen=True)
class Trained:
    """A completed run: its directory, parsed log, and every argument and DeepSpeed setting it printed."""

    run_dir: Path
    log: ParsedLog
    args: dict[str, Any]
    ds: dict[str, Any]
    probe: Path | None = None
    """Where the forward probe wrote the engine's logits of the final weights (engine.pt), if asked."""

    @property
    def losses(self) -> list[float]:
        return list(self.log.iterations["loss"])

    @property
    def text(self) -> str:
        return (self.run_dir / "train.log").read_text(errors="replace")


def held_out_probe(dataset: str, directory: Path, seq_length: int = SEQ_LENGTH) -> Path:
    """A forward-probe folder: two rows of seq_length + 1 tokens from the end of the prepared
    sample (the tiny model's micro batch; a short run's context unless given)."""
    tokens = np.fromfile(f"{dataset}.bin", dtype=np.uint16).astype(int)
    directory.mkdir(parents=True)
    rows = [tokens[start : start + seq_length + 1].tolist() for start in (-400, -200)]
    (directory / TOKENS_FILE).write_text(json.dumps(rows))
    return directory


def train(
    dataset: str,
    run_dir: Path,
    recipe: str,
    *overrides: str,
    short: bool = True,
    probe: Path | None = None,
    stops_at: int | None = None,
) -> Trained:
    """Launch `recipe` with `overrides` into `run_dir`; it must complete every iteration. With
    `probe` (a held_out_probe folder), the engine's forward pass of the final weights goes there.
    `stops_at`: the iteration a run ends at before its train_iters (a token budget). No
    hardware.master_port is given, and the default 29500 is held while the run starts and trains,
    as another run would hold it: each run proves the one-node launch's free port (and concurrent
    test sessions on one machine do not meet on a port)."""
    argv = [
        "launch",
        recipe,
        f"data.path={dataset}",
        *(SHORT if short else []),
        *overrides,
        "--run-dir",
        str(run_dir),
    ]
    if probe is not None:
        os.environ[PROBE_ENV] = str(probe)
    try:
        with default_port_in_use():
            code = main(argv)
    finally:
        os.environ.pop(PROBE_ENV, None)
    status = json.loads((run_dir / "status.json").read_text())
    log_tail = (run_dir / "train.log").read_text(errors="replace")[-3000:]
    assert code == 0 and status["state"] == "completed", (status["cause"], log_tail)
    return read_trained(run_dir, probe, stops_at)


def read_trained(run_dir: Path, probe: Path | None = None, stops_at: int | None = None) -> Trained:
    """A completed run as `train` returns it, read from its directory; every iteration ran (up to
    `stops_at`, where given) with a finite loss."""
    log_tail = (run_dir / "train.log").read_text(errors="replace")[-3000:]
    log = parse_log(run_dir / "train.log")
    dumped = ConfigCollector()
    for line in read_lines(run_dir / "train.log"):
        dumped.feed(line.text)
    trained = Trained(run_dir, log, dumped.args, dumped.ds, probe)
    last = stops_at or log.train_iters
    assert len(trained.losses) == last == int(log.iterations["iteration"][-1]), log_tail
    assert all(math.isfinite(loss) for loss in trained.losses), trained.losses
    return trained


def same_losses(a: Trained, b: Trained, tolerance: float) -> bool:
    """Whether the two runs logged the same number of losses, each within `tolerance` of the other's.
    The difference of two printed losses carries the float's own rounding (10.7924 - 10.79239 is
    1.0000000000331966e-05): a difference of one printed unit is within a tolerance of one unit."""
    return len(a.losses) == len(b.losses) and all(
        abs(x - y) <= tolerance * (1 + 1e-9) for x, y in zip(a.losses, b.losses, strict=True)
    )
