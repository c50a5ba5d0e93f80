"""From the paths a user gives to summary rows: discover runs, parse each log once,
read the run directories, and order the rows by setup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zerolab.logs.parse import ParsedLog, parse_log
from zerolab.recipe.setups import ZERO_SETUPS
from zerolab.summarize.discover import Run, discover
from zerolab.summarize.rundir import read_run_dir
from zerolab.summarize.summary import Options, RunSummary, summarize_run
from zerolab.summarize.sweeps import SweepRuns, attach_sweeps, shortest_tails

SETUP_ORDER = tuple(name for name, _ in ZERO_SETUPS)


@dataclass
class Collection:
    """Summaries in setup order, and the inputs that could not be understood (with why)."""

    runs: list[RunSummary] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    options: Options = field(default_factory=Options)
    sweeps: list[SweepRuns] = field(default_factory=list)
    """The sweeps (`zerolab sweep`) the runs are cells of, in the order first met, each with its rows."""

    @property
    def sweep_keys(self) -> list[str]:
        """Every swept key of those sweeps, in order."""
        return list(dict.fromkeys(key for sweep in self.sweeps for key in sweep.plan.keys))


def setup_rank(summary: RunSummary) -> tuple[int, str]:
    """The ZeRO setups first (z0 ... z3_offload_param, in that order), then other setups, then unknown."""
    setup = summary.row.setup
    if setup in SETUP_ORDER:
        return SETUP_ORDER.index(setup), summary.row.name
    return (len(SETUP_ORDER), summary.row.name) if setup else (len(SETUP_ORDER) + 1, summary.row.name)


def summarize_paths(
    paths: list[Path], options: Options, progress: Callable[[Run], None] | None = None
) -> Collection:
    """Summarize every run under `paths` (UserError when a path is missing or holds none)."""
    collection = Collection(options=options)
    for run in discover(paths, collection.skipped):
        if progress:
            progress(run)
        facts = read_run_dir(run.run_dir) if run.run_dir else None
        if run.log is None:
            log = ParsedLog(run.path)
        else:
            try:
                log = parse_log(run.log)
            except OSError as error:
                collection.skipped.append((str(run.log), f"cannot read: {error.strerror or error}"))
                continue
            reason = log.understood()
            if reason and not (facts and facts.run is not None):
                collection.skipped.append((str(run.log), reason))
                continue
        collection.runs.append(summarize_run(run, log, facts, options))
    collection.runs.sort(key=setup_rank)
    collection.sweeps = attach_sweeps(collection.runs)
    if len(collection.sweeps) > 1:  # cells of several sweeps: `demo/zero-z0`, not `zero-z0` twice
        for sweep in collection.sweeps:
            for summary in sweep.runs:
                summary.row.name = f"{sweep.label}/{summary.row.name}"
    _disambiguate(collection.runs)
    return collection


def _disambiguate(runs: list[RunSummary]) -> None:
    """Runs of one name told apart by the end of their path: `tiny_z1 (20260101-000000)`, or as many
    of its last parts as it takes (`zero-z0 (a/demo/zero-z0)`)."""
    groups: dict[str, list[RunSummary]] = {}
    for summary in runs:
        groups.setdefault(summary.row.name, []).append(summary)
    for name, group in groups.items():
        if len(group) < 2:
            continue
        tails = shortest_tails([Path(summary.row.path) for summary in group])
        for summary, tail in zip(group, tails, strict=True):
            summary.row.name = f"{name} ({tail})"
