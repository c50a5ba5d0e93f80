"""`zerolab from-command COMMAND_FILE [--ds-config JSON] [--nodes N] [--gpus-per-node N] [--out RECIPE]`, or
`zerolab from-command --log LOG [--ds-config JSON] ...`: a launch the user already runs (a
`pretrain_gpt.py ...` command line, as a deepspeed or torchrun command or the arguments alone; or
a train.log, whose argument dump Megatron's own parser turns back into the command line, with the
DeepSpeed config DeepSpeed printed in it) and its DeepSpeed config become a recipe over the
shipped blocks; the recipe is rendered back and both launches are resolved by the engine and
compared, every difference named with why, and the porting traps named. The ranks are read from the
launcher (torchrun, deepspeed, mpiexec, mpirun, srun, jsrun, aprun) and the batch directives in the
file (#SBATCH, #PBS, #BSUB, #$), or given by --nodes / --gpus-per-node. Exit 0 with the recipe
(written to --out, or printed), 2 for bad input or a launch that cannot be a recipe (with why)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from zerolab.contracts import DEEPSPEED_CONFIG_FLAGS
from zerolab.engine.paths import engine_missing
from zerolab.errors import UserError
from zerolab.files import write_atomic
from zerolab.logs.config_dump import read_launch
from zerolab.porting.command import prepared_launch
from zerolab.porting.from_command import Ported, port, port_many, read_command
from zerolab.porting.layout import DEFAULT_GPUS_PER_NODE


def register(subparsers: Any) -> None:
    """Add `zerolab from-command`."""
    parser = subparsers.add_parser(
        "from-command",
        help="a pretrain_gpt.py launch you run (and its ds_config) as a recipe, rendered back to prove it",
        description=__doc__,
    )
    parser.add_argument(
        "command_file", metavar="COMMAND_FILE", nargs="?", help="a file holding the launch's command line"
    )
    parser.add_argument(
        "--log",
        metavar="LOG",
        help="instead of a command line: the launch's log (its argument dump, and the DeepSpeed config "
        "DeepSpeed printed)",
    )
    parser.add_argument(
        "--ds-config",
        metavar="JSON",
        help="the launch's DeepSpeed config (its --deepspeed_config; with --log, default: the one the log "
        "printed)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="the nodes the launch runs on (default: as its launcher and batch directives say)",
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="ranks per node (default: as the launcher says; where it names none, as bare deepspeed: every "
        "GPU of the node, 8)",
    )
    parser.add_argument("--out", metavar="RECIPE", help="write the recipe here (default: print it)")
    parser.set_defaults(run=run)


def run(args: Any) -> int:
    if (args.command_file is None) == (args.log is None):
        raise UserError("from-command takes one launch: a COMMAND_FILE, or --log LOG")
    for flag, value, what in (
        ("--gpus-per-node", args.gpus_per_node, "the ranks a node runs"),
        ("--nodes", args.nodes, "the nodes the launch runs on"),
    ):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: give {what}, at least 1")
    if args.log:
        ported = _port_log(Path(args.log), args.ds_config, args.gpus_per_node or DEFAULT_GPUS_PER_NODE)
    else:
        command_file = Path(args.command_file)
        try:
            text = command_file.read_text()
        except OSError as error:
            raise UserError(f"{command_file}: cannot read the command line: {error.strerror}") from None
        _, words = read_command(text, str(command_file))
        ds_config = _ds_config(args.ds_config, words)
        prepared = prepared_launch(
            text,
            ds_config,
            name=command_file.stem,
            source=str(command_file),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        _needs_engine()
        (result,) = port_many([prepared.launch])
        if isinstance(result, UserError):
            raise result
        ported = result
        ported.notes[:0] = prepared.notes
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


def _needs_engine() -> None:
    missing = engine_missing()
    if missing:
        raise UserError(f"from-command asks the engine's own parser and config classes: {missing}")


def _port_log(log: Path, ds_config_file: str | None, gpus_per_node: int) -> Ported:
    """The launch `log` printed, ported: its ranks laid out `gpus_per_node` a node."""
    logged = read_launch(log)
    ds_config = _ds_config(ds_config_file, []) if ds_config_file else logged.ds_config
    if not ds_config:
        raise UserError(
            f"{log}: DeepSpeed printed no config in it (`json = {{` after `DeepSpeedEngine configuration:`; "
            "the log ends before the engine starts?): give the launch's config with --ds-config JSON"
        )
    world = int(logged.arguments.get("world_size", "0") or 0)
    procs = min(world, gpus_per_node)
    if world < 1 or world % procs:
        raise UserError(
            f"{log}: world size {logged.arguments.get('world_size')} is not whole nodes of "
            f"--gpus-per-node {gpus_per_node}: give the ranks a node your launch ran"
        )
    _needs_engine()
    return port(
        [],
        ds_config,
        nodes=world // procs,
        procs_per_node=procs,
        name=log.stem,
        argument_dump=logged.arguments,
    )


def _ds_config(path: str | None, words: list[str]) -> dict[str, Any]:
    """The DeepSpeed config: --ds-config, else the file the command names if it is there, else none."""
    named = next(
        (
            value
            for index, word in enumerate(words)
            for flag, _, value in [word.partition("=")]
            if flag in DEEPSPEED_CONFIG_FLAGS
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
