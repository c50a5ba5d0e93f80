"""`zerolab render`, `zerolab show` and `zerolab diff`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from zerolab import __version__, rundir
from zerolab.backends.slurm_options import add_slurm_arguments, backend_words, site_options
from zerolab.errors import UserError
from zerolab.launch.plan import plan
from zerolab.recipe.compose import RecipeProblems, load_recipe
from zerolab.recipe.diff import diff_recipes, format_diff
from zerolab.recipe.output import resolved_yaml
from zerolab.recipe.render import render


def add_recipe_parser(subparsers: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    """A sub-command taking RECIPE and key.path=value overrides."""
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("recipe", help="recipe file, or a name under recipes/ (gpt2_z1, cpu/tiny_z1)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override a key (train.micro_batch_size=4) or merge a block (model=gpt2-355m)",
    )
    return parser


def register(subparsers: Any) -> None:
    """Add render, show and diff."""
    description = "print the exact launch command and DeepSpeed config of a recipe"
    render_parser = subparsers.add_parser("render", help=description, description=description)
    render_parser.add_argument(
        "words",
        nargs="*",
        metavar="RECIPE [KEY=VALUE ...]",
        help="recipe file or name under recipes/ (gpt2_z1, cpu/tiny_z1), then overrides "
        "(train.micro_batch_size=4, model=gpt2-355m); with --resume, only overrides",
    )
    render_parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="render the continuation of the run in RUN_DIR from its last checkpoint",
    )
    render_parser.add_argument(
        "--dry-run", action="store_true", help="print only, write nothing (the default without --out)"
    )
    render_parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: argv, env, ds_config, world_size, nodes, procs_per_node",
    )
    render_parser.add_argument(
        "--out", type=Path, help="also write ds_config.json and command.sh into this new directory"
    )
    add_slurm_arguments(
        render_parser,
        "print an sbatch script that runs the recipe across its nodes instead (docs/multinode.md)",
    )
    render_parser.set_defaults(run=run_render)

    show_parser = add_recipe_parser(subparsers, "show", "print the fully resolved recipe as YAML")
    show_parser.set_defaults(run=run_show)

    diff_parser = subparsers.add_parser(
        "diff",
        help="how two recipes and their renders differ (exit 0: the same, 1: they differ)",
        description="Each recipe takes the KEY=VALUE overrides after it, e.g. "
        "`zerolab diff gpt2_z2 gpt2_z2 train.micro_batch_size=8`. Exit 0 when the two are the same, "
        "1 when they differ, as diff(1).",
    )
    diff_parser.add_argument("words", nargs="+", metavar="RECIPE [KEY=VALUE ...] RECIPE [KEY=VALUE ...]")
    diff_parser.set_defaults(run=run_diff)


def run_render(args: argparse.Namespace) -> int:
    """Print (and with --out, write) the render."""

    if args.slurm and (args.json or args.out is not None):
        raise UserError("--slurm prints an sbatch script; it does not combine with --json or --out")
    site = site_options(args)
    out = args.out if args.out is not None and not args.dry_run else None
    if out is not None:
        refuse_unwritable_out(out)
    planned = plan(
        backend_words(args),
        resume=args.resume,
        run_dir=out.resolve() if out else None,
        launching=False,
        site=site,
    )
    if args.json:
        print(json.dumps(planned.launch.as_json(), indent=2))
    else:
        print(planned.backend.job(planned), end="")
    if out is not None:
        write_render(planned.launch, out, planned.name)
    elif args.out is not None:
        print(f"zerolab: --dry-run: nothing written to {args.out}", file=sys.stderr)
    return 0


def refuse_unwritable_out(out: Path) -> None:
    """UserError, before anything is printed or written, when --out cannot become a new directory:
    it exists, or a part of its path is a file."""
    if out.exists() or out.is_symlink():
        raise UserError(f"--out {out}: already exists; choose a new directory")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(
                f"--out {out}: {parent} is a file, not a directory; choose a new directory whose parent "
                "is a directory (or does not exist yet)"
            )


def write_render(launch: Any, out: Path, name: str) -> None:
    """ds_config.json (and deepspeed_env for a launch over ssh) and an executable command.sh
    (runnable from anywhere: it changes to this directory) in a new directory."""

    refuse_unwritable_out(out)
    try:
        directory = rundir.claim(out)
    except OSError as error:
        raise UserError(f"--out {out}: cannot create it: {error.strerror}; choose a new directory") from None
    launch.write_config(directory, os.environ)
    note = f"{name}, rendered {rundir.now_iso()} by zerolab {__version__}"
    rundir.write_command(directory, launch.script(Path.cwd(), note))


def run_show(args: argparse.Namespace) -> int:
    """Print the resolved recipe; one that fails the checks across keys is printed too (without
    the values derived from it), then its problems (exit 2)."""

    try:
        recipe = load_recipe(args.recipe, args.overrides)
    except RecipeProblems as problems:
        print(resolved_yaml(problems.recipe, derived=False), end="", flush=True)
        raise
    print(resolved_yaml(recipe), end="")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    """Print the differences between two recipes."""

    sides: list[list[str]] = []
    for word in args.words:
        if "=" in word and sides:
            sides[-1].append(word)
        else:
            sides.append([word])
    if len(sides) != 2 or "=" in sides[0][0]:
        raise UserError(
            "zerolab diff takes two recipes, each followed by its overrides: "
            "RECIPE [KEY=VALUE ...] RECIPE [KEY=VALUE ...]"
        )
    a, b = (load_recipe(recipe, overrides) for recipe, *overrides in sides)
    parts = diff_recipes(a, render(a), b, render(b))
    print(format_diff(*(" ".join([str(recipe.path), *recipe.overrides]) for recipe in (a, b)), parts))
    return 1 if any(parts.values()) else 0
