"""A rank killed by a signal, read from what the launchers really print (zerolab.logs.signals): the
real logs of the pinned engine where a rank was killed, and every other real log, which must
not read as one."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from zerolab.logs.lines import clean_line
from zerolab.logs.signals import RankSignalReader, killed_by, signal_words

SIGKILL_WORDS = (
    "killed by SIGKILL (signal 9): likely out of host memory (the OOM killer) or a scheduler's limit"
)
"""How a death by SIGKILL is said (zerolab.logs.signals.killed_by)."""

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
SIGKILL_RANK1 = LOGS / "cpu-engine" / "signal_sigkill_rank1.log"  # torchrun
TWO_NODES_SIGKILL_RANK1 = LOGS / "cpu-engine" / "two_nodes_sigkill_rank1.log"  # torchrun on node2, under srun
DSLAUNCHER_SIGSEGV = LOGS / "cpu-engine" / "dslauncher_sigsegv_rank1.log"  # the deepspeed launcher


def read(lines: list[str]):
    reader = RankSignalReader()
    for number, raw in enumerate(lines, start=1):
        line = clean_line(number, raw)
        reader.feed(line.number, line.source, line.text)
    return reader.found


def test_signals_in_words():
    assert signal_words(signal.SIGSEGV) == "SIGSEGV (signal 11)"
    assert killed_by(signal.SIGSEGV) == "killed by SIGSEGV (signal 11)"
    assert killed_by(signal.SIGKILL) == SIGKILL_WORDS
    assert signal_words(99) == "signal 99"


def test_torchruns_root_cause_names_the_rank_and_the_signal():
    lines = SIGKILL_RANK1.read_text().splitlines()
    found = read(lines)
    assert found.describe() == f"rank 1 {SIGKILL_WORDS}"
    assert lines[found.line - 1].strip().startswith("exitcode  : -9")
    # The ranks' last output before torchrun's report; not torchrun's own "Sending process ..." line.
    assert len(found.last_lines) == 5
    assert found.last_lines[-1].startswith(" iteration        3/     200 |")
    assert not any("torch/distributed/elastic" in line for line in found.last_lines)


def test_the_deepspeed_launcher_says_the_signal_but_not_the_rank():
    found = read(DSLAUNCHER_SIGSEGV.read_text().splitlines())
    assert found.describe() == "a rank killed by SIGSEGV (signal 11)"
    assert found.last_lines[-1].startswith(" iteration        3/     200 |")
    assert not any("launch.py" in line for line in found.last_lines)


def test_a_root_cause_that_exited_with_an_error_is_no_death_by_signal():
    # The other ranks are then stopped by torchrun with SIGTERM: not the cause.
    text = SIGKILL_RANK1.read_text().replace(
        "exitcode  : -9 (pid: 13816)  (SIGKILL)", "exitcode  : 1 (pid: 13816)"
    )
    text = text.replace("failed (exitcode: -9)", "failed (exitcode: 1)")
    assert read(text.splitlines()) is None


def test_a_ranks_own_prefixed_lines_are_its_last_lines():
    lines = SIGKILL_RANK1.read_text().splitlines()
    report = next(i for i, line in enumerate(lines) if "failed (exitcode:" in line)
    prefixed = [*lines[:report], "[rank1]: loading a batch", "[rank0]: waiting in allreduce", *lines[report:]]
    assert read(prefixed).last_lines == (" loading a batch",)


LOST_PEER = [  # a killed rank's data loader worker, as torch prints it (the pinned engine on CPU)
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 138, in _serve',
    "[rank0]:     with self._listener.accept() as conn:",
    "[rank0]:          ^^^^^^^^^^^^^^^^^^^^^^^",
    '[rank0]:   File "/usr/lib/python3.11/multiprocessing/connection.py", line 395, in _recv',
    "[rank0]:     chunk = read(handle, remaining)",
    "[rank0]:             ^^^^^^^^^^^^^^^^^^^^^^^",
    "[rank0]: ConnectionResetError: [Errno 104] Connection reset by peer",
]


def test_the_tracebacks_of_processes_that_lost_the_killed_rank_are_not_its_last_lines():
    """Rank 1 killed at iteration 3: the tracebacks of the processes that lost their connection to
    it (rank 0's data loader worker, or a peer rank unprefixed) follow the death and would push the
    iterations out; a traceback that ends otherwise stays."""
    lines = SIGKILL_RANK1.read_text().splitlines()
    report = next(i for i, line in enumerate(lines) if "failed (exitcode:" in line)
    unprefixed = [line.replace("[rank0]:", "") for line in LOST_PEER]
    for lost in (LOST_PEER, unprefixed, [line.replace("[rank0]", "[rank1]") for line in LOST_PEER]):
        found = read([*lines[:report], *lost, *lines[report:]])
        assert found.last_lines[-1].startswith(" iteration        3/     200 |"), found.last_lines
    error = [*unprefixed[:-1], "ValueError: a batch of the wrong shape"]
    found = read([*lines[:report], *error, *lines[report:]])
    assert found.last_lines[-1] == "ValueError: a batch of the wrong shape"


@pytest.mark.parametrize(
    "path",
    sorted(
        {*(LOGS / "real").glob("*.log"), *(LOGS / "cpu-engine").glob("*.log")}
        - {SIGKILL_RANK1, DSLAUNCHER_SIGSEGV, TWO_NODES_SIGKILL_RANK1}
    ),
    ids=lambda path: path.stem,
)
def test_no_other_real_log_reads_as_a_rank_killed_by_a_signal(path):
    assert read(path.read_text(errors="replace").splitlines()) is None


def test_torchrun_on_another_node_names_it():
    found = read(TWO_NODES_SIGKILL_RANK1.read_text().splitlines())
    assert found.describe() == f"rank 1 on node2 {SIGKILL_WORDS}"


def test_over_several_nodes_the_rank_killed_by_a_signal_is_the_cause_not_the_ranks_that_failed_after_it():
    """Each node's torchrun reports its own root cause: node1's rank 0 exits with an error after
    node2's rank 1 was killed; the cause is node2's, in whichever order the reports arrive."""
    lines = TWO_NODES_SIGKILL_RANK1.read_text().splitlines()
    killed = lines[lines.index("Root Cause (first observed failure):") :]
    node1 = [line.replace("node2", "node1").replace("rank      : 1", "rank      : 0") for line in killed]
    node1 = [line.replace("-9 (pid: 20182)  (SIGKILL)", "1 (pid: 20100)") for line in node1]
    for order in ([*node1, *killed], [*killed, *node1]):
        assert read(order).describe().startswith("rank 1 on node2 killed by SIGKILL (signal 9)")
