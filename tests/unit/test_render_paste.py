"""The text `zerolab render` prints for pasting is inert: whatever a recipe's description, name
and values hold (quotes, `$(...)`, backticks, newlines, semicolons), bash parses it, writes the
DeepSpeed config into RUN_DIR and starts only the launcher, with exactly the rendered
arguments and environment. A stub launcher on PATH records what it was given."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from zerolab.errors import UserError
from zerolab.locations import RECIPES_DIR
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.output import read_render_text, render_text
from zerolab.recipe.render import as_text, render

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")

HOSTILE = [
    "$(touch canary)",
    "`touch canary`",
    "'; touch canary; '",
    '"; touch canary; "',
    "\ntouch canary\n",
    "\r\ntouch canary #",
    "${HOME:-$(touch canary)}",
    "\\",
    "ZEROLAB_DS_CONFIG",
    "\nZEROLAB_DS_CONFIG\ntouch canary\n",
    "&& touch canary",
    "| touch canary",
    "> canary",
    "# not a comment\ntouch canary",
]
"""Text that would run `touch canary` (or write a file) if any of it reached the shell."""

text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=30),
    st.lists(st.sampled_from(HOSTILE), min_size=2, max_size=3).map("".join),
)
file_stem = st.text(st.sampled_from("ab$`;'\"() &|<>{}*?!~#-"), min_size=1, max_size=12)

STUB = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$STUB_OUT/argv"
env -0 > "$STUB_OUT/env"
"""

TINY_BASE = [
    "model/gpt2-tiny",
    "data/dolly",
    "precision/fp32",
    "hardware/cpu-2ranks",
    "train/tiny-demo",
    "activation_checkpointing/none",
    "zero/z1",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    description=text,
    stem=file_stem,
    data_path=text,
    data_name=text,
    wandb_project=text,
    wandb_name=text,
    launcher=st.sampled_from(["torchrun", "deepspeed"]),
)
def test_pasting_the_render_starts_only_the_launcher_with_its_arguments(
    description, stem, data_path, data_name, wandb_project, wandb_name, launcher
):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        recipe_file = root / f"{stem}.yaml"
        recipe_file.write_text(
            yaml.safe_dump(
                {
                    "description": description,
                    "base": TINY_BASE,
                    "data": {"path": data_path, "name": data_name},
                    "logging": {"wandb_project": wandb_project, "wandb_name": wandb_name},
                    "hardware": {"launcher": launcher},
                }
            )
        )
        try:
            recipe = load_recipe(recipe_file)
        except UserError:
            assume(False)  # the schema refuses it (e.g. an empty path): nothing is rendered
        launch = render(recipe)
        pasted = render_text(recipe, launch)
        assert subprocess.run([BASH, "-n"], input=pasted, text=True, capture_output=True).returncode == 0

        work, stubs, out, run_dir = (root / name for name in ("work", "stubs", "out", "run"))
        for directory in (work, stubs, out):
            directory.mkdir()
        (stubs / launcher).write_text(STUB)
        (stubs / launcher).chmod(0o755)
        env = {
            "PATH": f"{stubs}:/usr/bin:/bin",
            "RUN_DIR": str(run_dir),
            "STUB_OUT": str(out),
            "HOME": scratch,
        }
        finished = subprocess.run([BASH], input=pasted, text=True, capture_output=True, cwd=work, env=env)
        assert finished.returncode == 0, finished.stderr

        assert list(work.iterdir()) == []  # nothing ran in the paste directory: no canary, no file
        assert [path.name for path in run_dir.iterdir()] == ["ds_config.json"]
        assert json.loads((run_dir / "ds_config.json").read_text()) == launch.ds_config
        expected = [as_text(token).replace("${RUN_DIR}", str(run_dir)) for token in launch.argv[1:]]
        assert (out / "argv").read_bytes().split(b"\0")[:-1] == [os.fsencode(token) for token in expected]
        started_with = dict(
            entry.split("=", 1) for entry in (out / "env").read_text().split("\0") if "=" in entry
        )
        assert {name: started_with.get(name) for name in launch.env} == launch.env
        assert read_render_text(pasted) == (launch.ds_config, launch.shell())


def test_without_run_dir_set_nothing_is_written_and_nothing_starts(tmp_path):
    recipe = load_recipe(RECIPES_DIR / "cpu" / "tiny_z1.yaml")
    pasted = render_text(recipe, render(recipe))
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "torchrun").write_text("#!/usr/bin/env bash\ntouch started\n")
    (stubs / "torchrun").chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path)}
    finished = subprocess.run([BASH], input=pasted, text=True, capture_output=True, cwd=tmp_path, env=env)
    assert finished.returncode != 0
    assert "set RUN_DIR to the run directory first" in finished.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["stubs"]
