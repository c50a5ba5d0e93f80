"""benchmarks/rank_startup.py with the real engine: each row imports what its patches say (the
launch's, optimizer step included, without torch's compiler, sympy or transformers, each
lazy-import workaround left out bringing its modules back), so that its seconds compare what they
claim to."""

from __future__ import annotations

import re

from benchmark_helpers import table_rows

ROW = re.compile(r"\| (.+?) \| ([\d.]+) \| ([\d.]+) \| (yes|no) \| (yes|no) \| (yes|no) \| (yes|no) \|")


def test_each_row_imports_what_its_patches_leave_out(engine, tmp_path):
    rows = table_rows("rank_startup", tmp_path, ROW, "--reps", "1")
    assert [(row.group(1), row.group(4, 5, 6, 7)) for row in rows] == [
        ("every workaround (as a launch)", ("no", "no", "no", "no")),
        ("without lazy_compiler_import", ("yes", "yes", "yes", "no")),
        ("without lazy_compiler_import and lazy_transformers_import", ("yes", "yes", "yes", "yes")),
    ]
    assert all(float(row.group(2)) > 0 and float(row.group(3)) > 0 for row in rows)
