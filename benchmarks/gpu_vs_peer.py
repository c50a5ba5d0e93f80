"""zerolab's GPU recipes against a plain PyTorch GPT-2 on the same GPU, in one run (run by hand).

    python3 benchmarks/gpu_vs_peer.py                 # one CUDA GPU, the engine set up (or the image)
    python3 benchmarks/gpu_vs_peer.py --device cpu --tiny --iters 6 --out /tmp/gpu.md   # its CPU test

For GPT-2 1.5B (micro batch 4) and 124M (micro 16), global batch 32 x 1024, bf16, one GPU: the
peer (benchmarks/peer_gpt2.py: SDPA, torch.compile, fused AdamW), then zerolab's seed recipes at
the ZeRO stages `--cases` names (gpt2_dp, gpt2_z1, gpt2_z2) with `hardware.procs_per_node=1` and
the `--set` overrides (speed switches), and, for a case word `fsdp2/SIZE:STAGES`, the second engine's
twins of the seed recipes (gpt2_fsdp2_dp, gpt2_fsdp2_z2, gpt2_fsdp2_z3: PyTorch FSDP2, docs/engines.md;
the speed switches are the engine's, so `--set` is not applied to them), launched by `zerolab launch`
and measured by `zerolab summarize` (steady-state median tokens/s of its summary.json); dropout 0
on zerolab's side, as the peer has none. Writes benchmarks/gpu.md: one line per case ending
`ratio: N.NN` (zerolab's tokens/s over the peer's), each MFU (both by zerolab's FLOP count over the
GPU's peak), the targets met or missed (the FSDP2 cases have none) and, for each engine case that
misses one, the top kernels of a few profiled training steps (torch.profiler, through the engine
patch profile_training_steps). The report is written after
every case; stopped by SIGTERM (a time limit), the case that was training is summarized from what
its log holds and marked cut.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from zerolab import __version__
from zerolab.backends.local import free_port
from zerolab.engine.paths import engine_missing, engine_python
from zerolab.rank.step_profile import (
    DEFAULT_PROFILE_STEPS,
    PROFILE_DIR_ENV,
    PROFILE_STEPS_ENV,
    profile_file,
)
from zerolab.summarize.flops import ModelShape

REPO = Path(__file__).resolve().parents[1]
PEER = REPO / "benchmarks" / "peer_gpt2.py"
SAMPLE = REPO / "data_prep" / "samples" / "dolly151.jsonl"
GPU_REPORT = REPO / "benchmarks" / "gpu.md"
ENGINE, FSDP2 = "megatron-deepspeed", "fsdp2"
RECIPES = {
    ENGINE: {0: "gpt2_dp", 1: "gpt2_z1", 2: "gpt2_z2"},
    FSDP2: {0: "gpt2_fsdp2_dp", 2: "gpt2_fsdp2_z2", 3: "gpt2_fsdp2_z3"},
}
"""engine -> ZeRO stage -> the seed recipe that runs it (they differ only in their zero block)"""
FSDP2_NAMES = {0: "DDP", 2: "z2 (weights kept)", 3: "z3 (resharded)"}
"""The FSDP2 setups as the report names them (zerolab.recipe.fsdp2's mapping of the zero stage)."""
RATIO_TARGETS = {"gpt2-1.5b": 1.0, "gpt2-124m": 0.8}
"""zerolab's tokens/s at ZeRO-0 over the peer's, at least (issue 47)."""
MFU_TARGET_PCT = 40.0
MFU_TARGET_MODEL = "gpt2-1.5b"
ZERO_TARGET = 0.9
"""ZeRO-1 and ZeRO-2 at this share of ZeRO-0's tokens/s, at least (within 10%)."""

console = Console(highlight=False)


@dataclass(frozen=True)
class Size:
    """A model size as zerolab names its block and the peer its shape, and its micro batch."""

    model: str
    peer: str
    micro: int


GPU_SIZES = (Size("gpt2-1.5b", "1.5b", 4), Size("gpt2-124m", "124m", 16))
TINY_SIZES = (Size("gpt2-tiny", "tiny", 4),)
GPU_GLOBAL_BATCH, TINY_GLOBAL_BATCH = 32, 8
GPU_CASES, TINY_CASES = ["1.5b:0,2", "124m:0,2"], ["tiny:0"]


class Stopped(Exception):
    """SIGTERM came: the check's time for this step is over."""


def stop(signum: int, frame: Any) -> None:
    raise Stopped


def parse_cases(words: list[str], sizes: tuple[Size, ...]) -> list[tuple[Size, str, list[int]]]:
    """`[fsdp2/]SIZE:STAGES` words (`1.5b:0,2`, `fsdp2/124m:0,3`) as (size, engine, ZeRO stages), in
    the order given; SystemExit naming the word that is not one."""
    by_name = {size.peer: size for size in sizes}
    cases = []
    for word in words:
        engine, _, case = word.rpartition("/")
        engine = engine or ENGINE
        name, _, stages = case.partition(":")
        try:
            zeros = [int(stage) for stage in stages.split(",")]
        except ValueError:
            zeros = []
        known = RECIPES.get(engine, RECIPES[ENGINE])
        if engine not in RECIPES or name not in by_name or not zeros or not set(zeros) <= set(known):
            sys.exit(
                f"--cases {word!r}: give [fsdp2/]SIZE:STAGES, SIZE one of {', '.join(by_name)} and STAGES "
                f"among {','.join(map(str, RECIPES[ENGINE]))} (fsdp2/: among "
                f"{','.join(map(str, RECIPES[FSDP2]))}) (e.g. {sizes[0].peer}:0,2)"
            )
        cases.append((by_name[name], engine, zeros))
    return cases


@dataclass
class Case:
    """One size at one ZeRO stage: the peer's measurement and zerolab's summary row."""

    size: Size
    zero: int
    peer: dict[str, Any]
    row: dict[str, Any]
    engine: str = ENGINE
    missed: list[str] = field(default_factory=list)
    profile: str | None = None
    cut: bool = False
    """Stopped by a time limit while training: measured from the iterations its log holds."""

    @property
    def name(self) -> str:
        cut = f" (cut at iteration {self.row.get('iterations_done')})" if self.cut else ""
        setup = f"FSDP2 {FSDP2_NAMES[self.zero]}" if self.engine == FSDP2 else f"ZeRO-{self.zero}"
        return f"{self.size.model} micro {self.size.micro}, {setup}{cut}"

    @property
    def recipe(self) -> str:
        """The seed recipe (or its FSDP2 twin) that runs the case."""
        return RECIPES[self.engine][self.zero]

    @property
    def label(self) -> str:
        """The case's run-directory name."""
        return f"{self.size.model}-{'fsdp2-' if self.engine == FSDP2 else ''}z{self.zero}"

    @property
    def ratio(self) -> float:
        """zerolab's tokens/s over the peer's."""
        return self.row["tokens_per_s_per_gpu"] / self.peer["tokens_per_s"]

    @property
    def peer_mfu_pct(self) -> float | None:
        """The peer's MFU by zerolab's FLOP count (the same model) over the same peak."""
        peak = self.row.get("peak_tflops")
        if not peak:
            return None
        shape = ModelShape(
            self.row["num_layers"],
            self.row["hidden_size"],
            self.row["seq_length"],
            self.row["padded_vocab_size"],
        )
        samples_per_s = self.peer["tokens_per_s"] / self.row["seq_length"]
        return 100.0 * shape.flops_per_sample() * samples_per_s / (peak * 1e12)


def run(command: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run `command` with its output in `log`; on failure stop with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with console.status(f"{what} (log: {log})"), log.open("w") as out:
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        try:
            code = process.wait()
        except Stopped:  # the child has the signal too (one process group): let it end as it does
            process.wait()
            raise
    if code != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        sys.exit(f"{what} failed (exit code {code}); the end of {log}:\n{tail}")
    console.print(f"{what}: done in {time.monotonic() - started:.0f} s")


def zerolab(*args: str) -> list[str]:
    """The command line of `zerolab ARGS` in this Python."""
    return [sys.executable, "-m", "zerolab", *args]


def measure_peer(size: Size, options: argparse.Namespace, global_batch: int) -> dict[str, Any]:
    """The peer's JSON line for `size`."""
    log = options.work / "peer" / f"{size.peer}.log"
    command = [str(engine_python()), str(PEER), size.peer, str(size.micro), "--device", options.device,
               "--global-batch", str(global_batch), "--steps", str(options.peer_steps),
               "--warmup-steps", str(options.peer_warmup_steps)]  # fmt: skip
    run(command, log, f"peer {size.peer} micro {size.micro}")
    return json.loads(log.read_text().strip().splitlines()[-1])


def overrides(
    size: Size, options: argparse.Namespace, global_batch: int, iters: int, engine: str = ENGINE
) -> list[str]:
    """zerolab's side of a case: the recipe at this size on one device, the peer's batch, no dropout,
    and, on the engine, the --set overrides."""
    device = ["hardware=cpu-2ranks", "precision=fp32"] if options.device == "cpu" else []
    return [*device, f"model={size.model}", "hardware.procs_per_node=1",
            f"train.micro_batch_size={size.micro}", f"train.global_batch_size={global_batch}",
            "model.attention_dropout=0", "model.hidden_dropout=0", *data_overrides(options),
            f"train.iters={iters}", "train.lr_warmup_iters=1", "train.log_interval=1",
            "train.eval_iters=1", *(options.set if engine == ENGINE else [])]  # fmt: skip


def data_overrides(options: argparse.Namespace) -> list[str]:
    """The dataset: --data as given, else the bundled sample under its own name (dolly-sample); of
    any size (data.min_documents null: speed does not depend on how much text there is)."""
    sample = [] if options.data_given else ["data=dolly-sample"]
    return [*sample, f"data.path={options.data}", "data.min_documents=null"]


def launch(recipe: str, settings: list[str], run_dir: Path, what: str, **profiling: str) -> None:
    """`zerolab launch` into `run_dir` on a free port; profiled only when `profiling` names the
    profile variables (never by ones this shell happens to have set)."""
    env = {k: v for k, v in os.environ.items() if k not in (PROFILE_DIR_ENV, PROFILE_STEPS_ENV)}
    port = f"hardware.master_port={free_port()}"
    run(zerolab("launch", recipe, *settings, port, "--run-dir", str(run_dir)), run_dir.with_suffix(".out"),
        what, env | profiling)  # fmt: skip


def summary_row(run_dir: Path, cut: bool = False) -> dict[str, Any] | None:
    """The run's row of `zerolab summarize`'s summary.json; of a run `cut` by a time limit, what its
    log holds (None when that is no steady-state throughput yet)."""
    out = run_dir.with_name(f"{run_dir.name}-summary")
    run(zerolab("summarize", str(run_dir), "--out", str(out), "--no-plots"), out.with_suffix(".out"),
        f"summarize {run_dir.name}")  # fmt: skip
    (row,) = json.loads((out / "summary.json").read_text())["runs"]
    if cut and not row["tokens_per_s_per_gpu"]:
        return None
    if row["status"] != "completed" or not row["tokens_per_s_per_gpu"]:
        sys.exit(f"{run_dir}: {row['status']}, no steady-state throughput ({row.get('cause')})")
    return row


def profile(case: Case, options: argparse.Namespace, global_batch: int) -> str:
    """The top kernels of a few training steps of the case's zerolab run (a separate, short run)."""
    first, last = DEFAULT_PROFILE_STEPS
    directory = options.work / "profile" / case.label
    profiling = {PROFILE_DIR_ENV: str(directory), PROFILE_STEPS_ENV: f"{first},{last}"}
    settings = overrides(case.size, options, global_batch, last + 1)
    launch(case.recipe, settings, directory / "run", f"profile zerolab {case.name}", **profiling)
    return Path(profile_file(str(directory), 0)).read_text()


def judge(cases: list[Case], on_gpu: bool) -> list[str]:
    """The targets, each met or MISSED; marks each case with the targets it misses."""
    for case in cases:
        case.missed = []
    if not on_gpu:
        return ["none judged: the targets are for one GPU; this run is on CPU"]
    lines = []
    by_key = {(case.size.model, case.zero): case for case in cases if case.engine == ENGINE}
    for case in cases:
        if case.engine != ENGINE:
            lines.append(f"not judged: {case.name} (the second engine, beside the engine; no target)")
            continue
        base = by_key.get((case.size.model, 0))
        checks = []
        target = RATIO_TARGETS.get(case.size.model)
        if case.zero == 0 and target is not None:
            checks.append(
                (f"zerolab >= {target}x the peer's tokens/s", case.ratio >= target, f"{case.ratio:.2f}x")
            )
            if case.size.model == MFU_TARGET_MODEL:
                mfu = case.row.get("mfu_pct") or 0.0
                checks.append((f"MFU >= {MFU_TARGET_PCT:.0f}%", mfu >= MFU_TARGET_PCT, f"{mfu:.1f}%"))
        elif case.zero != 0 and base is not None:
            share = case.row["tokens_per_s_per_gpu"] / base.row["tokens_per_s_per_gpu"]
            checks.append(
                (f"ZeRO-{case.zero} within 10% of ZeRO-0", share >= ZERO_TARGET, f"{share:.2f}x ZeRO-0")
            )
        for target_text, met, value in checks:
            lines.append(f"{'met' if met else 'MISSED'}: {target_text}, {case.name} ({value})")
            if not met:
                case.missed.append(target_text)
    return lines


def result_line(case: Case) -> str:
    """`NAME: zerolab T tokens/s (MFU, memory), peer T tokens/s (MFU, memory), ratio: R`."""

    def side(tokens: float, mfu: float | None, gib: float | None) -> str:
        details = [f"MFU {mfu:.1f}%" if mfu is not None else "MFU n/a"]
        details.append(f"{gib:.1f} GiB" if gib is not None else "memory n/a")
        return f"{tokens:,.0f} tokens/s ({', '.join(details)})"

    zerolab_side = side(
        case.row["tokens_per_s_per_gpu"], case.row.get("mfu_pct"), case.row.get("max_allocated_GiB")
    )
    peer_side = side(case.peer["tokens_per_s"], case.peer_mfu_pct, case.peer.get("max_alloc_gib"))
    return f"{case.name}: zerolab {zerolab_side}, peer {peer_side}, ratio: {case.ratio:.2f}"


def report(cases: list[Case], targets: list[str], options: argparse.Namespace, global_batch: int) -> str:
    """benchmarks/gpu.md's text."""
    peer = cases[0].peer
    seq = cases[0].row["seq_length"]
    fsdp2 = any(case.engine == FSDP2 for case in cases)
    precision = "bf16" if options.device == "cuda" else "fp32"
    command = shlex.join(["python3", "benchmarks/gpu_vs_peer.py", *sys.argv[1:]])
    lines = [
        "# zerolab against a plain PyTorch GPT-2 on one device",
        "",
        f"Written by `benchmarks/gpu_vs_peer.py` on {time.strftime('%Y-%m-%d %H:%M')}: device "
        f"**{peer['device']}**, torch {peer['torch']}, zerolab {__version__}. Command: `{command}`.",
        "",
        f"Global batch {global_batch} x {seq} tokens, {precision}, one device. The peer: "
        f"`benchmarks/peer_gpt2.py` ({peer['peer']}), {options.peer_steps} steps after "
        f"{options.peer_warmup_steps} of warm-up. zerolab: the seed recipes "
        f"({', '.join(sorted({case.recipe for case in cases}))}) "
        f"as shipped, with `hardware.procs_per_node=1`, the size and micro batch below, dropout 0 (the "
        f"peer has none), {options.iters} iterations"
        + (f", and {' '.join(f'`{word}`' for word in options.set)}" if options.set else "")
        + (" (not on the FSDP2 cases: the switches are the engine's)" if options.set and fsdp2 else "")
        + "; tokens/s is `zerolab summarize`'s steady-state median. MFU: both sides by zerolab's FLOP "
        "count (Megatron-DeepSpeed's formula) over the GPU's peak; memory: largest allocated.",
        "",
        "## Results",
        "",
        *(f"- {result_line(case)}" for case in cases),
        "",
        "## Targets",
        "",
        *(f"- {line}" for line in targets),
    ]
    profiled = [case for case in cases if case.profile]
    if profiled:
        lines += ["", "## Where the time goes", ""]
        for case in profiled:
            why = f"misses: {'; '.join(case.missed)}" if case.missed else "profiled on request"
            table = [line.rstrip() for line in case.profile.rstrip().splitlines()]
            lines += [f"### {case.name} ({why})", "", "```text", *table, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="gpt2-tiny, global batch 8 x 128 (the CPU test)")
    parser.add_argument(
        "--cases",
        nargs="+",
        help="[fsdp2/]SIZE:STAGES, in order (default: 1.5b:0,2 124m:0,2; with --tiny: tiny:0); fsdp2/ runs "
        "the FSDP2 twins of the seed recipes (stages 0, 2, 3)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of zerolab's side, e.g. speed.compiled_layers=true (repeatable)",
    )
    parser.add_argument("--iters", type=int, default=30, help="zerolab's training iterations per case")
    parser.add_argument("--peer-steps", type=int, default=10, help="the peer's measured steps")
    parser.add_argument("--peer-warmup-steps", type=int, default=3)
    parser.add_argument(
        "--profile",
        choices=["missed", "all", "none"],
        default="missed",
        help="profile zerolab's cases that miss a target (default), every case, or none",
    )
    parser.add_argument("--data", help="a prepared dataset prefix (default: the bundled dolly sample)")
    parser.add_argument("--work", type=Path, help="run directories and logs (default: logs/gpu_vs_peer/TIME)")
    parser.add_argument("--out", type=Path, help="the report (default: benchmarks/gpu.md on cuda)")
    options = parser.parse_args(argv)
    options.data_given = options.data is not None
    options.work = (options.work or REPO / "logs" / "gpu_vs_peer" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    if options.out is None:
        options.out = GPU_REPORT if options.device == "cuda" else options.work / "gpu-cpu.md"
    return options


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    missing = engine_missing()
    if missing:
        sys.exit(f"the engine is not set up: {missing}")
    sizes, global_batch = (TINY_SIZES, TINY_GLOBAL_BATCH) if options.tiny else (GPU_SIZES, GPU_GLOBAL_BATCH)
    planned = parse_cases(options.cases or (TINY_CASES if options.tiny else GPU_CASES), sizes)
    if options.data is None:
        prefix = options.work / "data" / "dolly"
        run(zerolab("prep", "dolly", "--input", str(SAMPLE), "--out", str(prefix), "--quiet"),
            options.work / "data" / "prep.out", "prepare the bundled dolly sample")  # fmt: skip
        options.data = f"{prefix}_text_document"
    cases: list[Case] = []
    options.out.parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, stop)
    peers: dict[str, dict[str, Any]] = {}
    try:
        for size, engine, zeros in planned:
            if size.peer not in peers:  # measured once per size, whichever engine's cases follow
                peers[size.peer] = measure_peer(size, options, global_batch)
            peer = peers[size.peer]
            for zero in zeros:
                planned_case = Case(size, zero, peer, {}, engine=engine)
                run_dir = options.work / "runs" / planned_case.label
                settings = overrides(size, options, global_batch, options.iters, engine)
                try:
                    launch(planned_case.recipe, settings, run_dir, f"zerolab {planned_case.name}")
                except Stopped:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends this process
                    row = summary_row(run_dir, cut=True)
                    cases += [Case(size, zero, peer, row, engine=engine, cut=True)] if row else []
                    raise
                row = summary_row(run_dir)
                assert row is not None  # a completed run has a throughput, or summary_row exits
                cases.append(Case(size, zero, peer, row, engine=engine))
                # written after every case: a run stopped by a time limit keeps the cases it measured
                options.out.write_text(
                    report(cases, judge(cases, options.device == "cuda"), options, global_batch)
                )
    except Stopped:
        if cases:
            options.out.write_text(
                report(cases, judge(cases, options.device == "cuda"), options, global_batch)
            )
        console.print(f"stopped by SIGTERM; wrote {options.out} with the {len(cases)} case(s) measured")
        return 124
    targets = judge(cases, options.device == "cuda")
    for case in cases:
        wanted = options.profile == "all" or (options.profile == "missed" and case.missed)
        if wanted and case.engine == ENGINE:  # the step profiler is an engine patch (rank.step_profile)
            case.profile = profile(case, options, global_batch)
    text = report(cases, targets, options, global_batch)
    options.out.write_text(text)
    for case in cases:
        console.print(result_line(case))
    for line in targets:
        console.print(line)
    console.print(f"wrote {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
