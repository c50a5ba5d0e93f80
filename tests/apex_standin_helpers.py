"""The NVIDIA apex stand-ins run in a Python of their own: what the unit and engine tests of
zerolab.rank.apex_standin share."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from zerolab.engine.paths import engine_python_env, zerolab_on_path
from zerolab.locations import REPO_ROOT
from zerolab.rank.apex_standin import BUILD_APEX

STANDINS_APPLIED = """
import importlib.util, sys
if importlib.util.find_spec("apex") is not None:
    sys.exit(77)
from zerolab.rank.apex_standin import APEX_TORCH_STANDINS
APEX_TORCH_STANDINS.apply()
"""

HAS_APEX = 77


def run_python(python: str, *code: str) -> str:
    """stdout of the pieces of `code`, each dedented, run by `python` after STANDINS_APPLIED;
    skips where that Python has apex."""
    program = "\n".join(textwrap.dedent(piece) for piece in (STANDINS_APPLIED, *code))
    result = subprocess.run(
        [python, "-c", program],
        env={**engine_python_env(), **zerolab_on_path(), "DS_ACCELERATOR": "cpu"},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    if result.returncode == HAS_APEX:
        pytest.skip(f"{python} has NVIDIA apex: the stand-ins are not applied there")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def assert_refused(out: str, *names: str) -> None:
    """Each of `names` was refused (one line `NAME: message` each), naming itself and the fix."""
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert sorted(lines) == sorted(names)
    for name, message in lines.items():
        assert message.startswith(f"{name}: zerolab's torch stand-in for NVIDIA apex does not provide it")
        assert message.endswith(f"build it with `{BUILD_APEX}`")


REFUSALS = """
def refused(name, call):
    try:
        call()
    except NotImplementedError as error:
        print(f"{name}: {error}")
"""
