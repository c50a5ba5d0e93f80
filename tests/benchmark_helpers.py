"""Loading a script of benchmarks/ (not a package) as a module, or running it, for the tests of what
it does."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/NAME.py as the module NAME."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def table_rows(name: str, tmp_path: Path, row: re.Pattern[str], *args: str) -> list[re.Match[str]]:
    """Run benchmarks/NAME.py ARGS with its table written under `tmp_path` (a script that measures on
    the engine starts the engine's Python itself); the table's lines that match `row`."""
    out = tmp_path / f"{name}.md"
    command = [sys.executable, str(BENCHMARKS / f"{name}.py"), *args, "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return [match for line in out.read_text().splitlines() if (match := row.fullmatch(line))]
