"""Launches from outside examples_deepspeed as recipes: each real public launch of
tests/fixtures/wild_launches/ (BigScience's Jean Zay scripts, ALCF's Polaris, OLCF's Summit, ABCI,
LUMI, vendor forks; provenance in each file and that folder's README) given to `zerolab
from-command`'s code as a user gives it (the batch directives, then the command line, and its
DeepSpeed config), ported, rendered back and resolved by the engine (zerolab.porting). Writes
benchmarks/results/wild_launches.md: `python benchmarks/wild_launches.py` (needs the engine, `make
setup`). tests/engine/test_wild_launches_engine.py holds the verdicts."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.engine.paths import engine_missing
from zerolab.errors import UserError
from zerolab.locations import REPO_ROOT
from zerolab.porting.command import prepared_launch
from zerolab.porting.from_command import Ported, port_many

LAUNCHES = REPO_ROOT / "tests" / "fixtures" / "wild_launches"
OUT = REPO_ROOT / "benchmarks" / "results" / "wild_launches.md"
TARGET = 0.8
"""The share of the set that must port (issue 62)."""
KINDS = ("native", "extra", "refused")


@dataclass
class Verdict:
    """One launch: what zerolab made of it."""

    name: str
    facts: dict[str, Any]
    kind: str
    ported: Ported | None = None
    reason: str = ""
    notes: tuple[str, ...] = ()

    @property
    def unexplained(self) -> list[str]:
        """Differences of the render named without why."""
        return [line for line in (self.ported.differences if self.ported else []) if not line.endswith(")")]


def launch_files() -> list[Path]:
    """The launch files of the set, by name."""
    return sorted(LAUNCHES.glob("*.json"))


def command_text(facts: dict[str, Any]) -> str:
    """What a user pastes: the batch directives, then the command line."""
    return "\n".join([*facts.get("scheduler", []), facts["command"]]) + "\n"


def verdicts(files: list[Path] | None = None) -> list[Verdict]:
    """Each launch's verdict, the engine asked twice for the whole set."""
    found: list[Verdict] = []
    prepared = []
    for path in files if files is not None else launch_files():
        facts = json.loads(path.read_text(encoding="utf-8"))
        given = facts.get("given", {})  # what the user answers where the porter asks for the ranks
        try:
            ready = prepared_launch(
                command_text(facts),
                facts.get("ds_config") or {},
                name=path.stem,
                source=path.name,
                nodes=given.get("nodes"),
                gpus_per_node=given.get("gpus_per_node"),
            )
        except UserError as error:
            found.append(Verdict(path.stem, facts, "refused", reason=str(error)))
            continue
        found.append(Verdict(path.stem, facts, "pending", notes=tuple(ready.notes)))
        prepared.append(ready.launch)
    results = iter(port_many(prepared) if prepared else [])
    for verdict in found:
        if verdict.kind != "pending":
            continue
        result = next(results)
        if isinstance(result, UserError):
            verdict.kind, verdict.reason = "refused", str(result)
        else:
            verdict.ported = result
            verdict.kind = "native" if result.native else "extra"
    return found


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", "<br>")


def report(found: list[Verdict]) -> str:
    """benchmarks/results/wild_launches.md's text."""
    counts = Counter(verdict.kind for verdict in found)
    total = len(found)
    ported = counts["native"] + counts["extra"]
    unexplained = sum(len(verdict.unexplained) for verdict in found)
    lines = [
        "# Launches from outside examples_deepspeed as recipes",
        "",
        "Written by `python benchmarks/wild_launches.py`: each real launch of",
        "`tests/fixtures/wild_launches/` (public repositories other than the engine's examples_deepspeed; "
        "repository, path, commit and",
        "license in each file) given to `zerolab from-command`'s code as a user gives it, its batch",
        "directives and command line with its DeepSpeed config, ported, rendered back, and both resolved",
        "by the pinned engine's parser and DeepSpeed's config classes. A refusal names each flag or key",
        "that cannot be carried, and why.",
        "",
        "| verdict | launches |",
        "|---|---|",
        f"| ported with native recipe keys only | {counts['native']} |",
        f"| ported with native keys and `extra` | {counts['extra']} |",
        f"| refused, each flag or key named with why | {counts['refused']} |",
        f"| **ported in all** | **{ported} of {total} ({100 * ported / max(total, 1):.0f}%)**, target "
        f"{100 * TARGET:.0f}% |",
        f"| values differing without a reason named | {unexplained} |",
        "",
        "| launch | site | verdict | ranks | values differing (unexplained) | extra | why refused / what was "
        "dropped or translated |",
        "|---|---|---|---|---|---|---|",
    ]
    for verdict in found:
        facts, ported = verdict.facts, verdict.ported
        extra = differing = ""
        if ported is not None:
            flags = [token for token in ported.recipe.extra.megatron_args if token.startswith("--")]
            extra = " ".join([*flags, *ported.recipe.extra.ds_config])
            differing = f"{len(ported.differences)} ({len(verdict.unexplained)})"
        ranks = next((note[len("ranks: ") :] for note in verdict.notes if note.startswith("ranks: ")), "")
        said = verdict.reason or "; ".join(note for note in verdict.notes if not note.startswith("ranks: "))
        lines.append(
            f"| [{verdict.name}](https://github.com/{facts['repo']}/blob/{facts['commit']}/{facts['path']}) "
            f"| {_cell(facts['site'])} | {verdict.kind} | {_cell(ranks)} | {differing} | {_cell(extra)} "
            f"| {_cell(said)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    missing = engine_missing()
    if missing:
        print(f"wild_launches: needs the engine: {missing}", file=sys.stderr)
        return 2
    found = verdicts()
    OUT.write_text(report(found), encoding="utf-8")
    counts = Counter(verdict.kind for verdict in found)
    print(f"wrote {OUT}: " + ", ".join(f"{kind} {counts[kind]}" for kind in KINDS) + f" of {len(found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
