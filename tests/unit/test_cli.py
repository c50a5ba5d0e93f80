import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from zerolab import __version__


def test_version_is_printed():
    result = subprocess.run(
        [sys.executable, "-m", "zerolab", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == f"zerolab {__version__}"


def test_no_command_prints_help_and_exits_2():
    result = subprocess.run([sys.executable, "-m", "zerolab"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: zerolab" in result.stdout


def test_tools_summarize_without_the_venv_or_dependencies_says_to_run_make_dev(tmp_path):

    repo = Path(__file__).resolve().parents[2]
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(repo / "tools" / "summarize", checkout / "tools" / "summarize")
    shutil.copy(repo / "pyproject.toml", checkout / "pyproject.toml")
    shutil.copytree(repo / "zerolab", checkout / "zerolab", ignore=shutil.ignore_patterns("__pycache__"))
    bare = tmp_path / "bare"  # a Python without zerolab's dependencies
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bare / 'bin'}:/usr/bin:/bin"

    result = subprocess.run(
        [str(checkout / "tools" / "summarize"), str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"run `make dev` in {checkout}" in result.stderr
    assert re.search(r"lacks '\w+', one of zerolab's dependencies", result.stderr)

    no_python = tmp_path / "no-python"  # coreutils only
    no_python.mkdir()
    (no_python / "dirname").symlink_to(shutil.which("dirname"))
    env["PATH"] = str(no_python)
    result = subprocess.run(
        ["/bin/bash", str(checkout / "tools" / "summarize"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2
    assert "no python3" in result.stderr and "make dev" in result.stderr
