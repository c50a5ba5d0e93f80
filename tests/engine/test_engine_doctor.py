"""`zerolab doctor` on the real engine: its facts, the CUDA rows on a CPU machine, helpers that crash
shown with the workaround runs use, checkouts side by side sharing the engine probe. Without the
engine: tests/unit/test_doctor_without_engine.py."""

from __future__ import annotations

import json
import os
import subprocess

from doctor_helpers import table_rows

from zerolab.cli import main
from zerolab.engine import data_helpers, doctor
from zerolab.engine.pins import load_pins


def test_doctor_reports_the_real_engine(engine, capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    pins = load_pins()
    assert report["missing"] == []
    assert report["engine"]["commit"] == pins.engine_commit
    env = report["engine_env"]
    assert env["torch"].split("+")[0] == pins.python["torch"]
    assert env["deepspeed"] == pins.python["deepspeed"]
    assert env["cuda_available"] is (len(env["devices"]) > 0)
    assert {"cpu_adam", "fused_adam"} <= set(env["ops"])
    assert all({"installed", "compatible", "jit_built"} == set(op) for op in env["ops"].values())
    assert report["data_helpers"]["ok"] is True and report["data_helpers"]["workaround"] is None
    assert report["cuda"]["needed"] is bool(env["devices"])


def test_on_a_cpu_machine_the_cuda_rows_say_not_needed(engine, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["doctor"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows["CUDA"].startswith("not used: no GPU, and torch ") and "is a CPU build" in rows["CUDA"]
    assert rows["apex"] == rows["fused kernels"] == "not built: CUDA is not used here (the CUDA row says why)"
    assert rows["data helpers"].endswith(": build_sample_idx answers correctly (smoke check)")


# An extension module named helpers that crashes when imported: a real SIGSEGV.
CRASHING_EXTENSION = """
#include <Python.h>
PyMODINIT_FUNC PyInit_helpers(void) { volatile int *nowhere = NULL; *nowhere = 1; return NULL; }
"""


def test_helpers_that_crash_are_shown_with_the_workaround_runs_use(engine, tmp_path, monkeypatch, capsys):
    _, python = engine
    data_dir = tmp_path / "engine" / data_helpers.DATA_DIR
    data_dir.mkdir(parents=True)
    (tmp_path / "crash.c").write_text(CRASHING_EXTENSION)
    include = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    module = data_helpers.module_path(data_dir, data_helpers.extension_suffix(python))
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-I{include}", str(tmp_path / "crash.c"), "-o", str(module)], check=True
    )
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", str(tmp_path / "engine"))
    monkeypatch.setenv("ZEROLAB_ENGINE_PYTHON", str(python))
    monkeypatch.setenv("COLUMNS", "300")

    assert main(["doctor", "--json"]) == 1  # the engine directory is no checkout
    report = json.loads(capsys.readouterr().out)
    assert report["data_helpers"] == {
        "module": str(module),
        "built": True,
        "ok": False,
        "detail": "build_sample_idx killed by SIGSEGV (signal 11)",
        "workaround": "python_sample_index",
    }
    assert not any("dataset helpers" in item["what"] for item in report["missing"])  # runs work
    main(["doctor"])
    assert table_rows(capsys.readouterr().out)["data helpers"] == (
        f"{module.name}: build_sample_idx killed by SIGSEGV (signal 11): runs use the engine's Python "
        "build_sample_idx (workaround python_sample_index)"
    )

    module.unlink()
    main(["doctor", "--json"])
    missing = {item["what"]: item["fix"] for item in json.loads(capsys.readouterr().out)["missing"]}
    assert missing[f"Megatron's dataset helpers ({module})"].startswith("make setup")


def test_checkouts_side_by_side_share_the_engine_probe(engine, tmp_path, monkeypatch):
    # a worktree or CI clone has its own probe.py, of another time and the same content: the
    # probe's cached result serves it, where keying by time re-ran the probe at each switch

    packages = load_pins().python
    first = doctor.probe_engine(packages, cached=True)
    other_checkout = tmp_path / "probe.py"
    other_checkout.write_bytes(doctor.PROBE_SCRIPT.read_bytes())
    os.utime(other_checkout, (1, 1))
    monkeypatch.setattr(doctor, "PROBE_SCRIPT", other_checkout)

    def probe_run_again(*args, **kwargs):
        raise AssertionError(f"the probe ran again: {args}")

    monkeypatch.setattr(doctor.subprocess, "run", probe_run_again)
    assert doctor.probe_engine(packages, cached=True) == first
