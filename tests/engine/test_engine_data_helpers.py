"""Megatron's dataset helpers (zerolab.engine.data_helpers) on the real engine: the real helpers.cpp
compiled for the engine's Python with no python3-config on PATH, smoke-checked in a process of their
own; a stale module is rebuilt; and where the check fails (a real segfault), the engine runs on its
own Python build_sample_idx (workaround python_sample_index), giving the same index as the C++ one.
The check's reports on stand-ins: tests/unit/test_data_helpers_check.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from data_helpers_standins import SEGFAULTING_HELPERS
from engine_patch_helpers import run_on_engine

from zerolab.engine import data_helpers
from zerolab.engine.data_helpers import smoke_check

TOOLS = ("make", "g++", "gcc", "c++", "cc", "as", "ld")


def test_the_real_helpers_build_without_python3_config_and_a_stale_module_is_rebuilt(
    engine, tmp_path, monkeypatch
):
    engine_dir, python = engine
    data_dir = tmp_path / "megatron" / "data"
    data_dir.mkdir(parents=True)
    for name in ("Makefile", "helpers.cpp"):
        shutil.copy(engine_dir / "megatron" / "data" / name, data_dir)
    tools = tmp_path / "bin"  # make and the compiler, and no python3-config
    tools.mkdir()
    for tool in TOOLS:
        if shutil.which(tool):
            (tools / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(tools))

    module = data_helpers.build(data_dir, python)
    assert module == data_dir / f"helpers{data_helpers.extension_suffix(python)}"
    assert smoke_check(data_dir, python) == data_helpers.SmokeCheck(
        True, "build_sample_idx answers correctly"
    )

    module.write_bytes(b"not a shared object")  # stale: newer than helpers.cpp, and broken
    stale = smoke_check(data_dir, python)
    assert not stale.ok and "ImportError" in stale.detail
    make = data_helpers.make_command(data_dir, data_helpers.extension_suffix(python), always=False)
    assert make[-1].startswith("LIBEXT=") and "-B" not in make
    data_helpers.build(data_dir, python)  # compiles even though make thinks the module up to date
    assert smoke_check(data_dir, python).ok


SAMPLE_INDEX = """
import json, sys
import numpy as np
import megatron.data.gpt_dataset as gpt_dataset
from megatron.data import helpers
sizes = np.random.default_rng(0).integers(1, 300, 400).astype(np.int32)
sample_idx = helpers.build_sample_idx(sizes, np.arange(400, dtype=np.int32), 128, 1, int(sizes.sum()))
print(json.dumps({
    "python": helpers.build_sample_idx is gpt_dataset._build_sample_idx,
    "module": getattr(helpers, "__file__", None),
    "sample_idx": sample_idx.tolist(),
}))
"""


def sample_index(engine: tuple[Path, Path], engine_dir: Path) -> tuple[dict, str]:
    """The engine's sample index for 400 documents, as megatron.data.helpers builds it under
    zerolab's workarounds from `engine_dir`'s megatron package; and what was printed."""
    out = run_on_engine((engine_dir, engine[1]), SAMPLE_INDEX)
    return json.loads(out.strip().splitlines()[-1]), out


@pytest.fixture(scope="module")
def compiled_index(engine) -> dict:
    return sample_index(engine, engine[0])[0]


def test_helpers_that_pass_the_check_are_the_compiled_ones(compiled_index):
    assert compiled_index["python"] is False and compiled_index["module"].endswith(".so")


def test_helpers_that_crash_are_replaced_by_the_engines_python_build_sample_idx(
    engine, tmp_path, compiled_index
):
    copy = tmp_path / "engine"
    for package in ("megatron", "tools"):  # what `import megatron` imports
        shutil.copytree(
            engine[0] / package, copy / package, ignore=shutil.ignore_patterns("helpers*.so", "build")
        )
    (copy / "megatron" / "data" / "helpers.py").write_text(SEGFAULTING_HELPERS)
    fallback, out = sample_index(engine, copy)
    assert (
        "zerolab: workaround python_sample_index: Megatron's C++ dataset helpers fail zerolab's check "
        "(build_sample_idx killed by SIGSEGV (signal 11))" in out
    )
    assert fallback["python"] is True
    assert fallback["sample_idx"] == compiled_index["sample_idx"]  # the same index, from Python
