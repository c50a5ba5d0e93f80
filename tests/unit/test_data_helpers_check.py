"""The dataset helpers' smoke check (zerolab.engine.data_helpers) on stand-in modules: a crash (a real
segfault), a wrong answer and an import error are each reported, not suffered; the image's build step
(`build check-data-helpers`) fails on them. The real helpers: tests/engine/test_engine_data_helpers.py;
the image's build failing: tests/container/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from data_helpers_standins import SEGFAULTING_HELPERS

from zerolab.engine.data_helpers import smoke_check

WRONG_HELPERS = "import numpy as np\n\ndef build_sample_idx(*args):\n    return np.zeros((250, 2))\n"


def helpers_dir(tmp_path: Path, helpers_py: str) -> Path:
    data_dir = tmp_path / "megatron" / "data"
    data_dir.mkdir(parents=True)
    (data_dir / "helpers.py").write_text(helpers_py)
    return data_dir


def test_a_crash_a_wrong_answer_and_an_import_error_are_reported(tmp_path):
    python = Path(sys.executable)
    crash = smoke_check(helpers_dir(tmp_path / "a", SEGFAULTING_HELPERS), python)
    assert (crash.ok, crash.detail) == (False, "build_sample_idx killed by SIGSEGV (signal 11)")
    wrong = smoke_check(helpers_dir(tmp_path / "b", WRONG_HELPERS), python)
    assert not wrong.ok and "wrong sample index" in wrong.detail
    absent = smoke_check(tmp_path / "nothing", python)
    assert not absent.ok and "No module named 'helpers'" in absent.detail


def test_the_images_check_step_fails_on_helpers_that_answer_wrong(tmp_path):
    helpers_dir(tmp_path, WRONG_HELPERS)
    result = subprocess.run(
        [sys.executable, "-m", "zerolab.engine.build", "check-data-helpers", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "wrong sample index" in result.stderr and "python_sample_index" in result.stderr
