"""The upstream launch scripts as recipes: each GPT script of an engine checkout's
examples_deepspeed run at its defaults with stub launchers (zerolab.porting.capture), its launch
ported (zerolab.porting.from_command) and classified: native keys alone, native keys and
`extra`, or not expressible with the reason (the engine refusing the script's own launch, or
zerolab). benchmarks/upstream_scripts.py writes the table; tests/engine/test_porting_upstream.py
checks a set of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from zerolab.errors import UserError
from zerolab.porting.capture import capture_script
from zerolab.porting.from_command import Launch, Ported, port_many
from zerolab.porting.layout import launch_layout

GPUS_PER_NODE = 8
"""The GPUs of a node the scripts run on at their defaults (nvidia-smi's stub answer)."""


@dataclass
class Verdict:
    """One script: what zerolab made of its launch."""

    script: str
    kind: str
    """native, extra, refused by the engine (the script's own launch), or refused by zerolab."""
    ported: Ported | None = None
    reason: str = ""

    @property
    def unexplained(self) -> list[str]:
        """Differences of the render named without why."""
        return [line for line in (self.ported.differences if self.ported else []) if not line.endswith(")")]


def launch_scripts(root: Path) -> list[Path]:
    """The shell scripts under root/examples_deepspeed that name pretrain_gpt.py."""
    return sorted(
        path
        for path in (root / "examples_deepspeed").rglob("*.sh")
        if "pretrain_gpt" in path.read_text(errors="replace")
    )


def written_for(script: Path, launcher: list[str]) -> int | None:
    """The GPUs a script says it is written for (a literal `NUM_GPUS=64`, more than one node's)
    where its deepspeed launcher names no count and so would take them from a hostfile; else None."""
    if Path(launcher[0]).name != "deepspeed" or any(
        token.startswith(("--num_nodes", "--num_gpus", "--include", "--exclude")) for token in launcher
    ):
        return None
    found = re.search(r"^NUM_GPUS=(\d+)\s*$", script.read_text(errors="replace"), re.MULTILINE)
    gpus = int(found.group(1)) if found else 0
    return gpus if gpus > GPUS_PER_NODE and gpus % GPUS_PER_NODE == 0 else None


def survey(root: Path, scripts: list[Path] | None = None) -> list[Verdict]:
    """Each launching script's verdict (the scripts that launch nothing at their defaults left out)."""
    launches: list[tuple[str, Launch]] = []
    for script in scripts if scripts is not None else launch_scripts(root):
        captured = capture_script(script, root=root, gpus=GPUS_PER_NODE)
        if not captured:
            continue
        first = captured[0]
        layout = launch_layout(first.launcher, default_gpus_per_node=GPUS_PER_NODE)
        nodes, procs = layout.nodes, layout.procs_per_node
        gpus = written_for(script, first.launcher)
        if gpus is not None:  # placed on the nodes it names (a hostfile of gpus / 8 nodes)
            nodes = gpus // GPUS_PER_NODE
        name = str(script.relative_to(root))
        launches.append((name, Launch(script.stem, first.args, first.ds_config or {}, nodes, procs)))
    verdicts = []
    results = port_many([launch for _, launch in launches])
    for (name, _), result in zip(launches, results, strict=True):
        if isinstance(result, UserError):
            text = str(result)
            kind = (
                "refused by the engine"
                if text.startswith("the engine refuses your launch")
                else "refused by zerolab"
            )
            verdicts.append(
                Verdict(name, kind, reason=text.splitlines()[0] if kind.endswith("engine") else text)
            )
        else:
            verdicts.append(Verdict(name, "native" if result.native else "extra", result))
    return verdicts
