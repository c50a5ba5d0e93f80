"""A launch as a user gives it, made ready to port: its command line (with the batch directives
above it, where they are in the same text) read as the shell reads it, its ranks as its launcher
counts them (zerolab.porting.layout), the flags of forks and newer versions translated, dropped or
refused with why (zerolab.porting.forks), and its DeepSpeed config migrated to the pinned DeepSpeed
(zerolab.porting.ds_migration)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerolab.contracts import DEEPSPEED_CONFIG_FLAGS
from zerolab.errors import UserError
from zerolab.porting.ds_migration import migrated
from zerolab.porting.forks import translated
from zerolab.porting.from_command import Launch, groups, read_command
from zerolab.porting.layout import launch_layout
from zerolab.porting.megatron_only import through_deepspeed, without_deepspeed


@dataclass
class Prepared:
    """A launch to hand to port_many, and what was done to it on the way, each with why."""

    launch: Launch
    notes: list[str] = field(default_factory=list)


def prepared_launch(
    text: str,
    ds_config: dict[str, Any],
    *,
    name: str,
    source: str,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
) -> Prepared:
    """The launch of `text` (a command line read from `source`) and its `ds_config`; UserError naming
    each thing that cannot be carried, and why."""
    launcher, words = read_command(text, source)
    if not words:
        raise UserError(f"{source}: no arguments after the training script: give the launch's whole command")
    layout = launch_layout(launcher, text, gpus_per_node=gpus_per_node, nodes=nodes)
    notes = [f"ranks: {layout.nodes} node(s) x {layout.procs_per_node} ({layout.how})"]
    if launcher and not launcher[-1].endswith("pretrain_gpt.py"):
        notes.append(
            f"{launcher[-1]}: a fork's own training script; zerolab trains with the pinned engine's "
            "pretrain_gpt.py, which reads the same arguments where the engine has them"
        )
    for flag, values in groups(words):
        if flag in DEEPSPEED_CONFIG_FLAGS and not values:
            raise UserError(
                f"{source}: {flag} has no value in your launch (a shell variable or expression that came out "
                "empty where the script built the command?): DeepSpeed would stop at it; give its path"
            )
    args, fork_notes = translated(words)
    if without_deepspeed(args):
        args, ds_config, note = through_deepspeed(args)
        fork_notes.append(note)
    config, config_notes = migrated(ds_config)
    launch = Launch(name, args, config, layout.nodes, layout.procs_per_node)
    return Prepared(launch, notes + fork_notes + config_notes)
