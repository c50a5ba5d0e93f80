"""`zerolab from-command COMMAND_FILE [--ds-config JSON] [--gpus-per-node N] [--out RECIPE]`: a launch
the user already runs (a `pretrain_gpt.py ...` command line, as a deepspeed or torchrun command or
the arguments alone) and its DeepSpeed config become a recipe over the shipped blocks; the recipe
is rendered back and both launches are resolved by the engine and compared, every difference
named with why, and the porting traps named. Exit 0 with the recipe (written to --out, or printed),
2 for bad input or a launch that cannot be a recipe (with why)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from zerolab.engine.paths import engine_missing
from zerolab.errors import UserError
from zerolab.files import write_atomic
from zerolab.porting.from_command import launcher_layout, port, read_command


def register(subparsers: Any) -> None:
    """Add `zerolab from-command`."""
    parser = subparsers.add_parser(
        "from-command",
        help="a pretrain_gpt.py launch you run (and its ds_config) as a recipe, rendered back to prove it",
        description=__doc__,
    )
    parser.add_argument(
        "command_file", metavar="COMMAND_FILE", help="a file holding the launch's command line"
    )
    parser.add_argument(
        "--ds-config", metavar="JSON", help="the launch's DeepSpeed config (its --deepspeed_config)"
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=8,
        metavar="N",
        help="ranks per node where the command names none (bare deepspeed: every GPU; default 8)",
    )
    parser.add_argument("--out", metavar="RECIPE", help="write the recipe here (default: print it)")
    parser.set_defaults(run=run)


def run(args: Any) -> int:
    missing = engine_missing()
    if missing:
        raise UserError(f"from-command asks the engine's own parser and config classes: {missing}")
    command_file = Path(args.command_file)
    try:
        text = command_file.read_text()
    except OSError as error:
        raise UserError(f"{command_file}: cannot read the command line: {error.strerror}") from None
    launcher, words = read_command(text)
    ds_config = _ds_config(args.ds_config, words)
    nodes, procs = launcher_layout(launcher, args.gpus_per_node) if launcher else (1, args.gpus_per_node)
    ported = port(words, ds_config, nodes=nodes, procs_per_node=procs, name=command_file.stem)
    for title, lines in (
        ("differs from your launch, and why", ported.differences),
        ("porting traps (a default zerolab would change, kept as your launch had it)", ported.traps),
        ("left to zerolab", ported.notes),
    ):
        if lines:
            print(f"zerolab: {title}:", file=sys.stderr)
            for line in lines:
                print(f"  - {line}", file=sys.stderr)
    kind = "native keys only" if ported.native else "native keys and extra"
    differing = len(ported.differences)
    print(
        f"zerolab: the recipe ({kind}) renders your launch back, {differing} value(s) differing",
        file=sys.stderr,
    )
    if args.out:
        write_atomic(Path(args.out), ported.text)
        print(f"zerolab: wrote {args.out}", file=sys.stderr)
    else:
        print(ported.text, end="")
    return 0


def _ds_config(path: str | None, words: list[str]) -> dict[str, Any]:
    """The DeepSpeed config: --ds-config, else the file the command names if it is there, else none."""
    named = next(
        (
            value
            for index, word in enumerate(words)
            for flag, _, value in [word.partition("=")]
            if flag in ("--deepspeed_config", "--deepspeed-config")
            for value in [value or (words[index + 1] if index + 1 < len(words) else "")]
        ),
        None,
    )
    source = path or (named if named and Path(named).is_file() else None)
    if source is None:
        return {}
    try:
        config = json.loads(Path(source).read_text())
    except OSError as error:
        raise UserError(f"{source}: cannot read the DeepSpeed config: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UserError(
            f"{source}: not JSON, line {error.lineno}: {error.msg}; give the config DeepSpeed reads"
        ) from None
    if not isinstance(config, dict):
        raise UserError(f"{source}: a DeepSpeed config is a JSON object")
    return config
