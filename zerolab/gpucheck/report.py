"""The GPU check's report: gpu.md from what the check's steps left in its folder (logs/gpu-check,
or logs/gpu-check-rehearsal) and in logs/sweeps/ (the ladder's table, gpu_vs_peer's report, the
seed sweeps' summary.json), with `zerolab estimate` against each run's measured peak; the real
check's is benchmarks/gpu.md. In a results folder: a copy of it, the ladder's ladder.json, and the
run directories and plots as one tarball (checkpoints left out): few files, as a lent machine
returns at most eight.

    python -m zerolab.gpucheck.report --work logs/gpu-check [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from zerolab.files import write_atomic
from zerolab.gpucheck.check import (
    FASTEST,
    FINETUNE_RECIPE,
    FSDP2_REPORT,
    PEER_REPORT,
    SEED_SETUPS,
    STEP_NAMES,
    WORK,
    state_file,
    sweep_name,
)
from zerolab.locations import REPO_ROOT, SWEEPS_DIR

GPU_REPORT = REPO_ROOT / "benchmarks" / "gpu.md"
REPORT_NAME = "gpu.md"
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


def step_lines(work: Path) -> list[str]:
    """Each step with its time against its allowance, or that it did not run."""
    lines = []
    for name in STEP_NAMES:
        path = state_file(work, name)
        if not path.is_file():
            lines.append(f"- {name}: not run" if name != "report" else f"- {name}: this file")
            continue
        state = json.loads(path.read_text())
        problem = f", with a problem: {state['problem']}" if state.get("problem") else ""
        budget = f" of {state['budget_s']} s given" if state.get("budget_s") else ""
        lines.append(f"- {name}: {state['seconds']:.0f} s{budget}{problem}")
    return lines


def _included(path: Path, missing: str) -> list[str]:
    """The Markdown file at `path` below this report's headings (its title left out), or `missing`."""
    if not path.is_file():
        return [missing]
    body = path.read_text().splitlines()[1:]
    return [f"#{line}" if line.startswith("#") else line for line in body]


def _sweep(title: str, command: str, directory: Path, missing: str) -> list[str]:
    """A sweep's section: its summary.json, or of a sweep cut short (its cells written, no summary
    yet), the summary of the runs it has."""
    lines = ["", f"## {title}", "", command, ""]
    summary = directory / "summary.json"
    if not summary.is_file() and any(directory.glob("*/run.json")):
        from zerolab.summarize.report import summarize_sweep  # noqa: PLC0415 (the check starts on a bare Python)

        summarize_sweep(directory)
    if summary.is_file():
        return lines + seed_lines(json.loads(summary.read_text()))
    return [*lines, f"Not measured: {missing}."]


def report_text(work: Path) -> str:
    """The report's text for the check in `work`: the headline figures first (the peer, the seed
    setups), then the ladder."""
    sweeps = REPO_ROOT / SWEEPS_DIR
    lines = [
        "# zerolab on one GPU: the plain-PyTorch peer, the seed setups, the speed ladder",
        "",
        f"Written by `make gpu-check` on {time.strftime('%Y-%m-%d %H:%M %Z')}. GPU: **{gpu_name()}**.",
        "",
        "## Steps",
        "",
        *step_lines(work),
        "",
        "## zerolab against a plain PyTorch GPT-2",
        "",
        *_included(work / f"{PEER_REPORT}.md", "Not measured: the peer step did not run."),
        "",
        "## PyTorch FSDP2 beside the engine",
        "",
        *_included(work / f"{FSDP2_REPORT}.md", "Not measured: the fsdp2 step did not run."),
    ]
    lines += _sweep(
        "The seed setups at GPT-2 124M on one GPU",
        f"`zerolab sweep gpt2_dp {SEED_SETUPS} model=gpt2-124m train.micro_batch_size=16 "
        f"hardware.procs_per_node=1 {' '.join(FASTEST)} ...` (the seed recipes differ only in their zero "
        "block); steady-state medians by `zerolab summarize`; the estimate is `zerolab estimate`'s peak "
        "for the run's setup against its max allocated.",
        sweeps / sweep_name(work),
        "the seeds step did not run",
    )
    lines += ["", "## The speed ladder", ""]
    lines += _included(work / "ladder" / "ladder.md", "Not measured: the ladder step did not run.")
    lines += _sweep(
        "The five seed recipes as shipped (GPT-2 1.5B)",
        f"`zerolab sweep gpt2_dp {SEED_SETUPS} hardware.procs_per_node=1 ...`.",
        sweeps / sweep_name(work, "1.5b"),
        "the seeds_1_5b step did not run",
    )
    lines += _sweep(
        "The five GPT-2 XL fine-tuning recipes on one GPU",
        f"`zerolab sweep {FINETUNE_RECIPE} zero=z0,z1,z2,z3,z3_offload hardware.procs_per_node=1 ...`: "
        "a GPT-2 XL with random weights (the machine cannot download OpenAI's; memory and speed do not "
        "depend on the weights) fine-tuned on the shipped WNLI sample, bf16, 128 tokens per example.",
        sweeps / sweep_name(work, "finetune"),
        "the finetune step did not run",
    )
    return "\n".join(lines).rstrip() + "\n"


def _outside_tarball(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if any(part in info.name for part in LEFT_OUT_OF_TARBALL) else info


def _archived_as(directory: Path) -> str:
    """A folder's name in the tarball: its path in the checkout (logs/...), or its own name."""
    return str(directory.relative_to(REPO_ROOT)) if directory.is_relative_to(REPO_ROOT) else directory.name


def write_results(work: Path, results: Path, report: Path) -> list[Path]:
    """Copy the report and the ladder's JSON into `results`; tar the runs and plots; returns what
    was written."""
    results.mkdir(parents=True, exist_ok=True)
    written = []
    for source in (report, work / "ladder" / "ladder.json"):
        if source.is_file():
            write_atomic(results / source.name, source.read_bytes())
            written.append(results / source.name)
    tarball = results / TARBALL
    partial = tarball.with_name(f".{TARBALL}.partial")
    sweeps = REPO_ROOT / SWEEPS_DIR
    try:
        with tarfile.open(partial, "w:gz") as archive:
            for directory in (work, *sorted(sweeps.glob(f"{work.name}*"))):
                if directory.is_dir():
                    archive.add(directory, arcname=_archived_as(directory), filter=_outside_tarball)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(tarball)
    return [*written, tarball]


def write_report(work: Path, results: Path | None) -> list[Path]:
    """Write the report of the check in `work` (the real check's also as benchmarks/gpu.md) and,
    with `results`, the results folder; returns what was written."""
    work = (REPO_ROOT / work).resolve()
    report = work / REPORT_NAME
    report.parent.mkdir(parents=True, exist_ok=True)
    text = report_text(work)
    write_atomic(report, text)
    written = [report]
    if work == (REPO_ROOT / WORK).resolve():
        write_atomic(GPU_REPORT, text)
        written.append(GPU_REPORT)
    if results is not None:
        written += write_results(work, results, report)
    return written


def main(argv: list[str] | None = None) -> int:
    """Write the report (and the results folder's copies)."""
    parser = argparse.ArgumentParser(
        prog="python -m zerolab.gpucheck.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--work", type=Path, required=True, help="the check's folder (logs/gpu-check)")
    parser.add_argument(
        "--results", type=Path, help="where to copy the report, ladder.json and the runs' tarball"
    )
    args = parser.parse_args(argv)
    for path in write_report(args.work, args.results):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
