"""benchmarks/rank_startup.py with the real engine: each row imports what its patches say (the
launch's without torch's compiler or transformers, each lazy-import workaround left out bringing
its modules back), so that its seconds compare what they claim to."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"\| (.+?) \| ([\d.]+) \| ([\d.]+) \| (yes|no) \| (yes|no) \| (yes|no) \|")


def test_each_row_imports_what_its_patches_leave_out(engine, tmp_path):
    out = tmp_path / "rank-startup.md"
    command = [sys.executable, str(REPO / "benchmarks" / "rank_startup.py"), "--reps", "1", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [match for line in out.read_text().splitlines() if (match := ROW.fullmatch(line))]
    assert [(row.group(1), row.group(4, 5, 6)) for row in rows] == [
        ("every workaround (as a launch)", ("no", "no", "no")),
        ("without lazy_compiler_import", ("yes", "yes", "no")),
        ("without lazy_compiler_import and lazy_transformers_import", ("yes", "yes", "yes")),
    ]
    assert all(float(row.group(2)) > 0 and float(row.group(3)) > 0 for row in rows)
