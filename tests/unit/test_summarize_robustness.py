"""It never crashes: mutated real logs (byte flips, truncation, shuffled lines, random
bytes, huge lines) all summarize into valid JSON; large logs are streamed."""

from __future__ import annotations

import json
import random
import tempfile
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerolab.logs.parse import parse_log
from zerolab.summarize import tables
from zerolab.summarize.collect import Collection
from zerolab.summarize.discover import Run
from zerolab.summarize.summary import Options, summarize_run

FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"
LOGS = sorted(FIXTURES.glob("*/*.log"))


def _mutate(data: bytes, kind: str, rng: random.Random) -> bytes:
    if kind == "flip":
        mutable = bytearray(data)
        for _ in range(rng.randint(1, 200)):
            mutable[rng.randrange(len(mutable))] = rng.randrange(256)
        return bytes(mutable)
    if kind == "truncate":
        return data[: rng.randrange(len(data))]
    if kind == "shuffle":
        lines = data.split(b"\n")
        rng.shuffle(lines)
        return b"\n".join(lines)
    if kind == "random":
        return rng.randbytes(rng.randint(0, 20000))
    if kind == "huge":
        cut = rng.randrange(len(data))
        return data[:cut] + b"| lm loss: 1.0 |" * rng.randint(5000, 20000) + data[cut:]
    lines = data.split(b"\n")  # "splice": lines of this log spliced into themselves
    start = rng.randrange(len(lines))
    return b"\n".join(lines[:start] + lines[rng.randrange(len(lines)) :] + lines[start:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=st.sampled_from(LOGS),
    kind=st.sampled_from(["flip", "truncate", "shuffle", "random", "huge", "splice"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_mutated_real_logs_never_crash(log: Path, kind: str, seed: int):
    data = _mutate(log.read_bytes(), kind, random.Random(seed))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutated.log"
        path.write_bytes(data)
        parsed = parse_log(path)
        summary = summarize_run(Run(path), parsed, None, Options())
        collection = Collection(runs=[summary])
        json.loads(tables.json_text(collection))  # valid JSON: no NaN, no infinity
        tables.to_markdown(collection)
        tables.to_csv(collection)
        for key, value in summary.row.items():
            assert not isinstance(value, float) or value == value, key


def test_a_large_log_is_streamed_in_bounded_memory(tmp_path: Path):
    lines = (FIXTURES / "cpu-engine" / "final_z1.log").read_bytes().splitlines(keepends=True)
    iteration = next(line for line in lines if b" iteration " in line and b"tgs" in line)
    noise = b"".join(line for line in lines if b"iteration" not in line)
    path = tmp_path / "big.log"
    with open(path, "wb") as handle:
        for step in range(1, 100):
            handle.write(noise)
            handle.write(iteration.replace(b"       5/      20", f"{step:8d}/{100:8d}".encode()))
    size = path.stat().st_size
    assert size > 4_000_000  # the parser's own peak is about 0.14 MB, whatever the log's size
    tracemalloc.start()
    log = parse_log(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert log.iteration_count == 99
    assert peak < size / 10, f"peak {peak} bytes for a {size}-byte log"


def test_an_iteration_number_beyond_64_bits_is_left_out_with_a_warning(tmp_path: Path):
    good = (FIXTURES / "cpu-engine" / "final_z1.log").read_text()
    line = next(text for text in good.splitlines() if " iteration " in text)
    huge = line.replace(line.split("iteration", 1)[1].split("/", 1)[0], " " + "9" * 5000, 1)
    path = tmp_path / "digits.log"
    path.write_text(good + huge + "\n")
    summary = summarize_run(Run(path), parse_log(path), None, Options())
    assert any(
        "an iteration line's number of 5000 digits (left out)" in warning for warning in summary.warnings
    )
    assert summary.row["status"] == "completed"
