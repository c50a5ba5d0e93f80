"""The CPU demo's five setups and its progress line (the runs themselves: `make demo`, and
the engine tests of tests/test_launch_engine.py)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from zerolab.demo.cli import RECIPES
from zerolab.demo.progress import RunProgress
from zerolab.recipe import load_recipe, render
from zerolab.rundir import Status


def test_the_five_setups_differ_only_in_zero():
    recipes = [load_recipe(name) for name in RECIPES]
    assert [(r.zero.stage, r.zero.offload_optimizer) for r in recipes] == [
        (0, False),
        (1, False),
        (2, False),
        (3, False),
        (3, True),
    ]
    for recipe in recipes:
        launch = render(recipe)
        assert launch.world_size == 2 and launch.env["DS_ACCELERATOR"] == "cpu"
        assert recipe.train == recipes[0].train and recipe.model == recipes[0].model


def test_progress_follows_iterations_and_loss_from_real_log_lines():
    console = Console(file=io.StringIO(), width=120)
    progress = RunProgress(console, "[1/5] tiny_dp")
    progress.line(
        " iteration       10/      60 | consumed samples:           80 | elapsed time per iteration (ms): "
        "508.5 | learning rate: 9.818E-04 | global batch size:     8 | lm loss: 1.070141E+01 |\n"
    )
    progress.done(Status(state="completed"), Path("logs/tiny_dp/20261122-074124"))
    assert progress.first_loss == 10.70141
    assert "tiny_dp: completed" in console.file.getvalue()
    assert "logs/tiny_dp/20261122-074124" in console.file.getvalue()
