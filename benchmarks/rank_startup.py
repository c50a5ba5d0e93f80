"""A training rank's start-up: the seconds a fresh process of the engine's Python takes to import
what `pretrain_gpt.py` imports (Megatron's training loop, its GPT model, DeepSpeed) and to make and
step the optimizer a CPU run trains with (torch's AdamW, which imports dynamo unless deferred),
with every workaround a launch applies, and with the lazy-import workarounds left out, alternated
over `--reps` runs (the CPU seconds of the process, the wall seconds around it; median of each).
Run by hand, on an otherwise idle machine:

    .venv/bin/python benchmarks/rank_startup.py    # benchmarks/results/rank-startup-cpu.md

Each rank of every launch pays this before its first iteration (two ranks on the CPU demo).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from zerolab.engine.paths import engine_dir, engine_missing, engine_python_env
from zerolab.engine.scripts import engine_json
from zerolab.rank.import_hooks import apply_wanted
from zerolab.rank.megatron_entry import LAUNCH_PATCHES, OPT_IN_ENV

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS: dict[str, tuple[str, ...]] = {
    "every workaround (as a launch)": (),
    "without lazy_compiler_import": ("lazy_compiler_import",),
    "without lazy_compiler_import and lazy_transformers_import": (
        "lazy_compiler_import",
        "lazy_transformers_import",
    ),
}
"""What each row leaves out of the launch's patches."""
WATCHED = {
    "dynamo": "torch._dynamo",
    "inductor": "torch._inductor.compile_fx",
    "sympy": "sympy",
    "transformers": "transformers",
}
"""The modules whose import each row reports."""


def measure(left_out: list[str]) -> dict[str, Any]:
    """In the engine's Python: apply the launch's patches but `left_out`, import what pretrain_gpt.py
    imports, make and step an AdamW; this process's CPU seconds and which WATCHED modules were imported."""
    apply_wanted([patch for patch in LAUNCH_PATCHES if patch.name not in left_out])
    runpy.run_path(str(engine_dir() / "pretrain_gpt.py"), run_name="rank_startup")  # its imports, not main
    import torch  # the engine's, imported by now

    layer = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.ones(1, 8)).sum().backward()
    optimizer.step()
    imported = {name: module in sys.modules for name, module in WATCHED.items()}
    return {"cpu_s": time.process_time(), "imported": imported}


def measuring_env() -> dict[str, str]:
    """The environment a measuring process starts from: the engine's, on CPU, without the variables
    that ask for a launch's opt-in patches (megatron_entry's OPT_IN_ENV), so that each row applies
    exactly its own; zerolab's locations (ZEROLAB_HOME, ZEROLAB_ENGINE_DIR) are kept."""
    env = engine_python_env() | {"DS_ACCELERATOR": "cpu"}
    return {key: value for key, value in env.items() if key not in OPT_IN_ENV}


def run_once(left_out: tuple[str, ...]) -> dict[str, Any]:
    """One fresh process of the engine's Python: its measure() and the wall seconds around it."""
    began = time.perf_counter()
    measured = engine_json(Path(__file__), "--measure", *left_out, env=measuring_env())
    return measured | {"wall_s": time.perf_counter() - began}


def report(runs: dict[str, list[dict[str, Any]]], reps: int) -> str:
    """The markdown table: one row per variant."""
    lines = [
        "# A training rank's start-up, CPU",
        "",
        "Importing what `pretrain_gpt.py` imports, then making and stepping torch's AdamW, in a fresh "
        "process of the engine's Python, median of "
        f"{reps} alternated runs (`benchmarks/rank_startup.py`); {os.cpu_count()} cores.",
        "",
        "| patches applied | CPU s | wall s | " + " | ".join(f"{name} imported" for name in WATCHED) + " |",
        "|---|---|---|" + "---|" * len(WATCHED),
    ]
    for variant, measured in runs.items():
        cpu = statistics.median(run["cpu_s"] for run in measured)
        wall = statistics.median(run["wall_s"] for run in measured)
        imported = " | ".join("yes" if measured[-1]["imported"][name] else "no" for name in WATCHED)
        lines.append(f"| {variant} | {cpu:.2f} | {wall:.2f} | {imported} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Measure each variant --reps times, alternated, and write the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "rank-startup-cpu.md", help="the table's file")
    parser.add_argument("--measure", nargs="*", help=argparse.SUPPRESS)  # the engine-side half
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return 0
    missing = engine_missing()
    if missing:
        print(f"rank_startup: {missing}", file=sys.stderr)
        return 2
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for rep in range(args.reps):
        for variant, left_out in VARIANTS.items():
            runs[variant].append(run_once(left_out))
            print(f"{rep + 1}/{args.reps} {variant}: {runs[variant][-1]['cpu_s']:.2f} CPU s", file=sys.stderr)
    table = report(runs, args.reps)
    args.out.write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
