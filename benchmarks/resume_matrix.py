"""What the engine does with a checkpoint continued under another setup, measured on CPU with the
tiny GPT-2: for each pair below, a run saved at iteration 2 of 4 (`--exit-interval 2`) is continued
under the other setup through DeepSpeed's universal checkpoint, and its losses at iterations 3 and 4
are compared with those of the same recipe run to 4 uninterrupted. The pairs zerolab refuses are
forced through (every change taken as carried) to record what the engine does with them. Each row
of docs/resume.md's table (zerolab.recipe.resumption.CHANGES) has a pair here; the figures go to
benchmarks/results/resume-matrix-cpu.json. Run by hand, after `make setup`, from the repository
root (the dolly sample prepared: `make demo` does): `python benchmarks/resume_matrix.py`; about
25 tiny launches, 10 minutes on 2 cores."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import tempfile
from pathlib import Path

from zerolab import rundir
from zerolab.cli import main
from zerolab.locations import REPO_ROOT
from zerolab.recipe import resumption

OUT = REPO_ROOT / "benchmarks" / "results" / "resume-matrix-cpu.json"
ITERS = ["train.iters=4", "train.lr_warmup_iters=1", "train.log_interval=1"]
STOP_AT_2 = ["train.save_interval=2", "train.exit_interval=2"]
SAME_VOCABULARY = ["model.make_vocab_size_divisible_by=64"]  # x tensor 2: the padded rows of tensor 1

SOURCES: dict[str, list[str]] = {
    "z0 dp2": ["cpu/tiny_dp"],
    "z1 dp2": ["cpu/tiny_z1"],
    "z2 dp2": ["cpu/tiny_z2"],
    "z3 dp2": ["cpu/tiny_z3"],
    "z1 dp1 tp2": ["cpu/tiny_z1", "parallel.tensor=2", *SAME_VOCABULARY],
    "z1 dp1 pp2": ["cpu/tiny_z1", "parallel.pipeline=2"],
}
PAIRS: list[tuple[str, str, list[str]]] = [
    ("z1 dp2", "z1 dp1", ["hardware.procs_per_node=1"]),
    ("z1 dp2", "z2 dp2", ["zero=z2"]),
    ("z2 dp2", "z1 dp1", ["zero=z1", "hardware.procs_per_node=1"]),
    ("z3 dp2", "z3 dp1", ["hardware.procs_per_node=1"]),
    ("z3 dp2", "z3_offload dp2", ["zero=z3_offload"]),
    ("z0 dp2", "z1 dp2", ["zero=z1"]),
    ("z1 dp2", "z0 dp2", ["zero=z0"]),
    ("z2 dp2", "z3 dp2", ["zero=z3"]),
    ("z3 dp2", "z2 dp1", ["zero=z2", "hardware.procs_per_node=1"]),
    ("z1 dp1 tp2", "z1 dp2 tp1", ["parallel.tensor=1"]),
    ("z1 dp2", "z1 dp1 tp2", ["parallel.tensor=2", *SAME_VOCABULARY]),
    ("z1 dp1 pp2", "z1 dp2 pp1", ["parallel.pipeline=1"]),
]
_LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.E+-]+)")


def losses(run_dir: Path) -> dict[int, float]:
    """Iteration -> loss, from the run's train.log."""
    text = (run_dir / rundir.LOG_FILE).read_text(errors="replace") if run_dir.is_dir() else ""
    return {int(match[1]): float(match[2]) for match in _LOSS.finditer(text)}


def outcome(run_dir: Path, code: int) -> str:
    """How a continuation ended: completed, or its cause."""
    status, _ = rundir.read_status(run_dir) if run_dir.is_dir() else (None, [])
    if code == 0 and status is not None and status.state == rundir.COMPLETED:
        return "completed"
    return f"stopped: {status.cause if status and status.cause else f'exit status {code}'}"


def launch(words: list[str], run_dir: Path) -> int:
    return main(["launch", *words, "--run-dir", str(run_dir)])


def measure(root: Path, dataset: str) -> list[dict[str, object]]:
    """Every pair's outcome and the loss differences at iterations 3 and 4."""
    data = f"data.path={dataset}"
    made: dict[str, tuple[Path, Path]] = {}
    for name, (recipe, *overrides) in SOURCES.items():
        slug = name.replace(" ", "_")
        saved, whole = root / f"{slug}-saved", root / f"{slug}-whole"
        assert launch([recipe, data, *ITERS, *overrides, *STOP_AT_2], saved) == 0, name
        assert launch([recipe, data, *ITERS, *overrides], whole) == 0, name
        made[name] = saved, whole
    # every change taken as carried: the engine, not zerolab, decides what happens
    resumption.CHANGES = tuple(dataclasses.replace(change, carried=True) for change in resumption.CHANGES)
    rows = []
    for before, after, overrides in PAIRS:
        saved, whole = made[before]
        continued = root / f"{before}-to-{after}".replace(" ", "_")
        code = launch(["--resume", str(saved), *overrides], continued)
        ran, reference = losses(continued), losses(whole)
        differences = {it: abs(ran[it] - reference[it]) for it in (3, 4) if it in ran and it in reference}
        rows.append(
            {
                "saved": before,
                "continued": after,
                "overrides": overrides,
                "outcome": outcome(continued, code),
                "loss_difference": {str(it): round(value, 6) for it, value in differences.items()},
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main_benchmark() -> int:
    """Measure every pair and write the results file."""
    prefix = REPO_ROOT / "data" / "dolly-sample_text_document"
    if not Path(f"{prefix}.bin").is_file():
        print(f"no {prefix}.bin: prepare the dolly sample first (make demo)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="resume-matrix-") as root:
        rows = measure(Path(root), str(prefix))
    OUT.write_text(
        json.dumps({"engine": "Megatron-DeepSpeed on CPU (gloo), tiny GPT-2, fp32", "pairs": rows}, indent=2)
        + "\n"
    )
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main_benchmark())
