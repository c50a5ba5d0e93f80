"""Resource samples once a second to samples.csv (docs/run-directory.md): resident memory of
the training's whole process tree (shared pages counted once), system memory used and,
where NVML sees GPUs, each GPU's used memory and utilization."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

import psutil

from zerolab.engine.nvml import MIB, Gpus


def process_tree(root: psutil.Process) -> list[psutil.Process]:
    """`root` and every process below it that is still alive."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_resident_bytes(processes: list[psutil.Process]) -> int:
    """Resident memory of `processes` together: each one's proportional set size (PSS), so a
    page they share (forked data-loader workers, the same libraries) counts once, not once
    per process; plain RSS where PSS cannot be read. Processes that exited meanwhile count 0."""
    total = 0
    for process in processes:
        try:
            try:
                total += process.memory_full_info().pss
            except (AttributeError, psutil.AccessDenied):
                total += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return total


class Sampler:
    """A background thread writing one samples.csv row per `interval_s` for the tree under `pid`.

    It also remembers every process it has seen in that tree (`seen`), so that whatever a
    rank left behind can be stopped after the launcher exits.
    """

    def __init__(self, csv_path: Path, pid: int, interval_s: float = 1.0) -> None:
        self.csv_path = csv_path
        self.root = psutil.Process(pid)
        self.interval_s = interval_s
        self.seen: dict[int, psutil.Process] = {}
        self._gpus = Gpus()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerolab-sampler", daemon=True)
        self._started = time.monotonic()

    def start(self) -> Sampler:
        """Start sampling; the first row is written at once."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with self.csv_path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["elapsed_s", "process_tree_rss_MiB", "system_used_MiB", *self._gpus.columns()])
            while True:
                writer.writerow(self.sample())
                handle.flush()
                if self._stop.wait(self.interval_s):
                    break

    def sample(self) -> list[float]:
        """One row: elapsed seconds, process-tree RSS (MiB), system memory used (MiB), GPUs."""
        processes = process_tree(self.root)
        for process in processes:
            self.seen.setdefault(process.pid, process)
        return [
            round(time.monotonic() - self._started, 2),
            round(tree_resident_bytes(processes) / MIB, 1),
            round(psutil.virtual_memory().used / MIB, 1),
            *self._gpus.sample(),
        ]
