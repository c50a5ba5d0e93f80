"""The `zerolab` command. Each sub-command lives in its own module, which registers
its parser with `register(subparsers)` and sets `run` to a function of the parsed args."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from zerolab import __version__
from zerolab.errors import UserError, interrupted_line
from zerolab.locations import CHECKOUT

COMMAND_MODULES: tuple[str, ...] = (
    "zerolab.commands.recipe",
    "zerolab.commands.launch",
    "zerolab.commands.sweep",
    "zerolab.commands.ladder",
    "zerolab.commands.engine",
    "zerolab.commands.prep",
    "zerolab.commands.demo",
    "zerolab.commands.summarize",
    "zerolab.commands.estimate",
    "zerolab.commands.export",
    "zerolab.commands.import_weights",
    "zerolab.commands.evaluate",
    "zerolab.commands.generate",
    "zerolab.commands.from_command",
)


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: options and positional words (a recipe, its key=value overrides) in
    any order. A command with sub-commands of its own (`prep`, `engine`) parses in order, as
    argparse's intermixed parsing does not support them."""

    _intermixing = False
    _has_subcommands = False

    def add_subparsers(self, **kwargs: Any) -> Any:
        self._has_subcommands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._intermixing or self._has_subcommands:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    """The full `zerolab` argument parser."""
    parser = argparse.ArgumentParser(
        prog="zerolab",
        description="Recipes, data, launches and summaries for GPT-2 on Megatron-DeepSpeed.",
    )
    parser.add_argument("--version", action="version", version=f"zerolab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `zerolab`; bad input, or a Python without zerolab's dependencies, exits 2 with a
    message on stderr; Ctrl-C exits 130 with one line (errors.Interrupted: what it left)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"zerolab: error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if not error.name or error.name.split(".")[0] == "zerolab":
            raise
        print(f"zerolab: error: {missing_dependency(error.name)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print(interrupted_line(stop), file=sys.stderr)
        return 130


def missing_dependency(module: str) -> str:
    """What to run when this Python lacks one of zerolab's dependencies."""

    fix = (
        f"run `make dev` in {CHECKOUT} and use {CHECKOUT}/.venv/bin/zerolab (tools/summarize and "
        "recipes/*.sh use it when it is there)"
        if CHECKOUT
        else "install zerolab with its dependencies into it (pip install zerolab)"
    )
    return f"this Python ({sys.executable}) lacks {module!r}, one of zerolab's dependencies: {fix}"


if __name__ == "__main__":
    sys.exit(main())
