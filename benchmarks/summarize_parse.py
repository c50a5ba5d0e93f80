"""Parse speed of `zerolab summarize`: MB/s and peak traced memory on a large log made
by repeating a real CPU-engine log (iteration numbers rising), written to a temp dir.

    .venv/bin/python benchmarks/summarize_parse.py [--mb 200]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
import tracemalloc
from pathlib import Path

from zerolab.logs.parse import parse_log

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs" / "cpu-engine" / "final_z1.log"


def build_log(path: Path, megabytes: int) -> int:
    """Write a log of about `megabytes` MB, iterations rising across copies; returns its size."""
    body = SOURCE.read_bytes()
    repeats = max(1, megabytes * 1_000_000 // len(body))
    iteration = re.compile(rb" iteration +(\d+)/ +\d+ \|")
    with open(path, "wb") as handle:
        for repeat in range(repeats):

            def renumber(match: re.Match[bytes], offset: int = repeat * 20) -> bytes:
                return f" iteration {int(match.group(1)) + offset:8d}/{repeats * 20:8d} |".encode()

            handle.write(iteration.sub(renumber, body))
    return path.stat().st_size


def main() -> None:
    """Print MB/s (time) and, in a second pass, peak traced memory."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=200, help="size of the generated log (default 200 MB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.log"
        size = build_log(path, args.mb)
        start = time.perf_counter()
        log = parse_log(path)
        seconds = time.perf_counter() - start
        tracemalloc.start()
        parse_log(path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(f"log: {size / 1e6:.0f} MB, {log.lines:,} lines, {log.iteration_count:,} iteration lines")
    load = os.getloadavg()[0]
    print(f"parse: {seconds:.1f} s = {size / 1e6 / seconds:.1f} MB/s (one process; load average {load:.2f})")
    print(f"peak traced memory while parsing: {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
