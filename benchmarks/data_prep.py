"""Benchmark `zerolab prep` against Megatron-DeepSpeed's tools/preprocess_data.py (run by hand).

    .venv/bin/python benchmarks/data_prep.py --owt PATH/TO/owt1000.jsonl [--repeats 3]

Both tools tokenize the same JSONL ({"text": ...}) with the same worker count; wall time
includes startup. Inputs: the bundled dolly sample (as text records) and the OpenWebText
file given, repeated 10 times. Also measures the ceiling: the fastest tokenizer alone on
the same text already in memory. Prints a markdown table (MB = 10^6 bytes of JSONL).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.data_prep.records import DollyFields
from zerolab.data_prep.tokenizer import gpt2_encoding
from zerolab.engine.paths import engine_dir, engine_missing, engine_python

REPO = Path(__file__).resolve().parents[1]


def peak_tree_rss(command: list[str], cwd: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS in bytes summed over the process and its children)."""
    started = time.perf_counter()
    process = psutil.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        try:
            tree = [process, *process.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    if process.returncode:
        sys.exit(f"{command[:3]} failed:\n{process.stderr.read().decode()[-2000:]}")
    return seconds, peak


def zerolab_command(corpus: Path, out: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "zerolab", "prep", "jsonl", str(corpus), "--out", str(out),
            "--workers", str(workers), "--force", "--quiet"]  # fmt: skip


def megatron_command(corpus: Path, out: Path, workers: int) -> list[str]:
    return [str(engine_python()), "tools/preprocess_data.py", "--input", str(corpus),
            "--output-prefix", str(out), "--json-keys", "text", "--tokenizer-type", "GPT2BPETokenizer",
            "--vocab-file", str(GPT2_VOCAB), "--merge-file", str(GPT2_MERGES), "--append-eod",
            "--workers", str(workers)]  # fmt: skip


def ceiling(texts: list[str], threads: int) -> float:
    """Seconds of the fastest tokenizer call on `texts` in memory with `threads` threads."""
    encoding = gpt2_encoding()
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        encoding.encode_ordinary_batch(texts, num_threads=threads)
        best = min(best, time.perf_counter() - started)
        with ThreadPoolExecutor(threads) as pool:
            started = time.perf_counter()
            list(pool.map(lambda t: encoding.encode_to_numpy(t, disallowed_special=()), texts, chunksize=64))
            best = min(best, time.perf_counter() - started)
    return best


def build_inputs(owt: Path, work: Path) -> dict[str, Path]:
    dolly = work / "dolly151_text.jsonl"
    records = [
        json.loads(line) for line in (REPO / "data_prep/samples/dolly151.jsonl").read_text().splitlines()
    ]
    fmt = DollyFields(keep_empty=True)
    dolly.write_text("".join(json.dumps({"text": fmt.text_of(r)}) + "\n" for r in records))
    owt10 = work / "owt1000x10.jsonl"
    owt10.write_bytes(owt.read_bytes() * 10)
    return {"dolly151": dolly, "owt1000 x10": owt10}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--owt", type=Path, required=True, help="OpenWebText JSONL (e.g. owt1000.jsonl)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell; the median is reported")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    if engine_missing():
        sys.exit(f"the engine is needed for the comparison: {engine_missing()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, corpus in build_inputs(args.owt, work).items():
            lines = corpus.read_bytes().splitlines()
            texts = [json.loads(line)["text"] for line in lines]
            megabytes = corpus.stat().st_size / 1e6
            tokens = sum(len(gpt2_encoding().encode_ordinary(t)) + 1 for t in texts)
            for workers in args.workers:
                ceiling_s = ceiling(texts, workers)
                for tool, command, cwd in (
                    ("zerolab", zerolab_command(corpus, work / "z", workers), REPO),
                    ("Megatron-DeepSpeed", megatron_command(corpus, work / "m", workers), engine_dir()),
                ):
                    load = os.getloadavg()[0]
                    runs = [peak_tree_rss(command, cwd) for _ in range(args.repeats)]
                    seconds = statistics.median(r[0] for r in runs)
                    rows.append({
                        "input": name, "tool": tool, "workers": workers, "seconds": seconds,
                        "documents_per_s": len(texts) / seconds, "input_MB_per_s": megabytes / seconds,
                        "tokens_per_s": tokens / seconds, "peak_rss_MB": max(r[1] for r in runs) / 1e6,
                        "ceiling_MB_per_s": megabytes / ceiling_s, "load_average_1min": load,
                    })  # fmt: skip
                same = (work / "z_text_document.bin").read_bytes() == (
                    work / "m_text_document.bin"
                ).read_bytes()
                rows[-2]["bin_identical_to_megatron"] = same
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


def print_table(rows: list[dict]) -> None:
    cpu = platform.processor() or platform.machine()
    print(f"Machine: {psutil.cpu_count()} cores ({cpu}), {psutil.virtual_memory().total / 2**30:.0f} GiB, "
          f"Python {platform.python_version()}")  # fmt: skip
    print()
    print("| input | tool | workers | s | docs/s | input MB/s | tokens/s | peak RSS MB | vs Megatron "
          "| % of ceiling | load avg |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    megatron = {(r["input"], r["workers"]): r["seconds"] for r in rows if r["tool"] != "zerolab"}
    for r in rows:
        ratio = megatron[(r["input"], r["workers"])] / r["seconds"]
        share = 100 * r["input_MB_per_s"] / r["ceiling_MB_per_s"]
        cells = [r["input"], r["tool"], r["workers"], f"{r['seconds']:.2f}", f"{r['documents_per_s']:,.0f}",
                 f"{r['input_MB_per_s']:.2f}", f"{r['tokens_per_s']:,.0f}", f"{r['peak_rss_MB']:.0f}",
                 f"{ratio:.1f}x", f"{share:.0f}%", f"{r['load_average_1min']:.2f}"]  # fmt: skip
        print("| " + " | ".join(map(str, cells)) + " |")
    print()
    for r in rows:
        if "bin_identical_to_megatron" in r:
            print(
                f"- {r['input']}, {r['workers']} workers: tokenizer-alone ceiling "
                f"{r['ceiling_MB_per_s']:.1f} MB/s; .bin identical to Megatron's: "
                f"{r['bin_identical_to_megatron']}"
            )


if __name__ == "__main__":
    main()
