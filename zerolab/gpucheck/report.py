"""The GPU check's report: benchmarks/gpu.md from what the check's steps left in logs/gpu-check/
and logs/sweeps/gpu-check/ (the seed sweep's summary.json and plots, gpu_vs_peer's report), with
`zerolab estimate` against each run's measured peak; and, in a results folder, a copy of it, the
plots and the run directories as one tarball (checkpoints left out).

    python -m zerolab.gpucheck.report --work logs/gpu-check [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from zerolab.gpucheck.check import (
    FINETUNE_RECIPE,
    FINETUNE_SWEEP_NAME,
    STEP_NAMES,
    SWEEP_NAME,
    state_file,
)
from zerolab.locations import REPO_ROOT, SWEEPS_DIR

GPU_REPORT = REPO_ROOT / "benchmarks" / "gpu.md"
SWEEP_DIR = REPO_ROOT / SWEEPS_DIR / SWEEP_NAME
FINETUNE_SWEEP_DIR = REPO_ROOT / SWEEPS_DIR / FINETUNE_SWEEP_NAME
ESTIMATE_TARGET_PCT = 10.0
"""`zerolab estimate` within this many percent of every measured peak (issue 11's target)."""
TARBALL = "gpu-check-runs.tar.gz"
LEFT_OUT_OF_TARBALL = ("checkpoints", "global_step", ".pt")


def gpu_name() -> str:
    """The GPUs as nvidia-smi names them (`NVIDIA H100 80GB HBM3`), or why there is no name."""
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"no GPU named (nvidia-smi: {error})"
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return "; ".join(lines) if result.returncode == 0 and lines else "no GPU named (nvidia-smi failed)"


def seed_lines(summary: dict) -> list[str]:
    """The seed sweep's table, one row per setup, and the estimate's target judged for each run."""
    lines = [
        "| setup | status | tokens/s per GPU | ms/iter | MFU % | max allocated GiB | estimate GiB (error) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    judged = []
    for row in summary["runs"]:
        setup = ", ".join(f"{key}={value}" for key, value in (row.get("sweep") or {}).items()) or row["name"]

        def cell(key: str, digits: int = 1, row: dict = row) -> str:
            value = row.get(key)
            return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"

        error = row.get("estimate_error_pct")
        estimate = cell("estimated_peak_GiB", 2) + (f" ({error:+.1f}%)" if error is not None else "")
        lines.append(
            f"| {setup} | {row['status']} | {cell('tokens_per_s_per_gpu', 0)} | {cell('ms_per_iter')} | "
            f"{cell('mfu_pct')} | {cell('max_allocated_GiB', 2)} | {estimate} |"
        )
        if error is not None:
            met = abs(error) <= ESTIMATE_TARGET_PCT
            judged.append(
                f"- {'met' if met else 'MISSED'}: estimate within {ESTIMATE_TARGET_PCT:.0f}% of the measured "
                f"peak, {setup} ({error:+.1f}%)"
            )
    return [*lines, "", *(judged or ["- the estimate was judged for no run (no measured peak)"])]


def step_lines() -> list[str]:
    """Each step with its time, or that it did not run."""
    lines = []
    for name in STEP_NAMES:
        path = state_file(name)
        if not path.is_file():
            lines.append(f"- {name}: not run" if name != "report" else f"- {name}: this file")
            continue
        state = json.loads(path.read_text())
        problem = f", with a problem: {state['problem']}" if state.get("problem") else ""
        lines.append(f"- {name}: {state['seconds']:.0f} s{problem}")
    return lines


def report_text(work: Path) -> str:
    """benchmarks/gpu.md's text."""
    summary_path = SWEEP_DIR / "summary.json"
    peer = work / "gpu_vs_peer.md"
    lines = [
        "# zerolab on one GPU: the seed study and the peer benchmark",
        "",
        f"Written by `make gpu-check` on {time.strftime('%Y-%m-%d %H:%M %Z')}. GPU: **{gpu_name()}**.",
        "",
        "## Steps",
        "",
        *step_lines(),
        "",
        "## The five seed recipes on one GPU",
        "",
        "`zerolab sweep gpt2_dp zero=z0,z1,z2,z3,z3_offload hardware.procs_per_node=1 ...` (the seed recipes "
        "differ only in their zero block); steady-state medians by `zerolab summarize`; the estimate is "
        "`zerolab estimate`'s peak for the run's setup against its max allocated.",
        "",
    ]
    if summary_path.is_file():
        lines += seed_lines(json.loads(summary_path.read_text()))
    else:
        lines.append(
            f"Not measured: {summary_path.relative_to(REPO_ROOT)} is missing (the seeds step did not run)."
        )
    lines += [
        "",
        "## The five GPT-2 XL fine-tuning recipes on one GPU",
        "",
        f"`zerolab sweep {FINETUNE_RECIPE} zero=z0,z1,z2,z3,z3_offload hardware.procs_per_node=1 ...`: "
        "a GPT-2 XL with random weights (the machine cannot download OpenAI's; memory and speed do not "
        "depend on the weights) fine-tuned on the shipped WNLI sample, bf16, 128 tokens per example.",
        "",
    ]
    finetune_summary = FINETUNE_SWEEP_DIR / "summary.json"
    if finetune_summary.is_file():
        lines += seed_lines(json.loads(finetune_summary.read_text()))
    else:
        missing = finetune_summary.relative_to(REPO_ROOT)
        lines.append(f"Not measured: {missing} is missing (the finetune step did not run).")
    lines += ["", "## zerolab against a plain PyTorch GPT-2", ""]
    if peer.is_file():
        body = peer.read_text().splitlines()
        lines += [line.replace("# ", "### ", 1) if line.startswith("# ") else line for line in body[1:]]
    else:
        lines.append("Not measured: the peer step did not run.")
    return "\n".join(lines).rstrip() + "\n"


def _outside_tarball(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if any(part in info.name for part in LEFT_OUT_OF_TARBALL) else info


def write_results(work: Path, results: Path, report: Path) -> list[Path]:
    """Copy the report and the sweep's plots into `results`; tar the runs; returns what was written."""
    results.mkdir(parents=True, exist_ok=True)
    written = [Path(shutil.copy2(report, results / report.name))]
    written += [
        Path(shutil.copy2(png, results / f"gpu-{png.name}")) for png in sorted(SWEEP_DIR.glob("*.png"))
    ]
    tarball = results / TARBALL
    with tarfile.open(tarball, "w:gz") as archive:
        for directory in (work, SWEEP_DIR):
            if directory.is_dir():
                archive.add(directory, arcname=str(directory.relative_to(REPO_ROOT)), filter=_outside_tarball)
    return [*written, tarball]


def main(argv: list[str] | None = None) -> int:
    """Write benchmarks/gpu.md (and the results folder's copies)."""
    parser = argparse.ArgumentParser(
        prog="python -m zerolab.gpucheck.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--work", type=Path, required=True, help="the check's folder (logs/gpu-check)")
    parser.add_argument(
        "--results", type=Path, help="where to copy the report, the plots and the runs' tarball"
    )
    args = parser.parse_args(argv)
    work = (REPO_ROOT / args.work).resolve()
    GPU_REPORT.write_text(report_text(work))
    print(f"wrote {GPU_REPORT}")
    if args.results:
        for path in write_results(work, args.results, GPU_REPORT):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
