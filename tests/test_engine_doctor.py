"""`zerolab doctor`: what is missing, with the command that fixes it; the real engine's facts."""

from __future__ import annotations

import json
import os
import subprocess

from zerolab.cli import main
from zerolab.engine import data_helpers, doctor
from zerolab.engine.doctor import _probe_problems
from zerolab.engine.pins import load_pins


def test_without_an_engine_doctor_says_what_is_missing_and_how_to_fix_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path))
    monkeypatch.delenv("ZEROLAB_ENGINE_DIR", raising=False)
    monkeypatch.delenv("ZEROLAB_ENGINE_PYTHON", raising=False)
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["engine"]["commit"] is None and report["engine"]["matches_pin"] is False
    assert report["engine_env"] is None
    missing = {item["what"]: item["fix"] for item in report["missing"]}
    assert any("Megatron-DeepSpeed checkout" in what for what in missing)
    assert any("engine's Python environment" in what for what in missing)
    assert all("make setup" in fix for what, fix in missing.items() if "engine" in what or "Megatron" in what)
    assert all(entry["ok"] for entry in report["tokenizer"].values())

    assert main(["doctor"]) == 1
    text = capsys.readouterr().out
    assert "missing" in text and "fix: make setup" in text


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


def table_rows(text: str) -> dict[str, str]:
    """The report's table, row name -> value (printed wide enough not to wrap)."""
    return {
        cells[1].strip(): cells[2].strip() for line in text.splitlines() if len(cells := line.split("│")) == 4
    }


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


def test_in_the_gpu_image_the_base_images_torch_meets_the_torch_pin(monkeypatch):

    pins = load_pins().python
    packages = dict(pins, torch="2.8.0a0+5228986c39.nv25.6")
    probe = {"packages": packages}
    monkeypatch.delenv("ZEROLAB_IMAGE", raising=False)
    assert [p["what"] for p in _probe_problems(probe, pins)] == [
        f"torch=={pins['torch']} in the engine environment (has 2.8.0a0+5228986c39.nv25.6)"
    ]
    monkeypatch.setenv("ZEROLAB_IMAGE", "nvcr.io/nvidia/pytorch:25.06-py3")
    assert _probe_problems(probe, pins) == []
    assert _probe_problems({"packages": dict(packages, deepspeed="0.19.8")}, pins) != []


def test_without_an_engine_the_table_states_no_placeholder_as_a_fact(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path))
    monkeypatch.delenv("ZEROLAB_ENGINE_DIR", raising=False)
    monkeypatch.delenv("ZEROLAB_ENGINE_PYTHON", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["doctor"]) == 1
    rows = table_rows(capsys.readouterr().out)
    checkout = rows["Megatron-DeepSpeed"]
    assert checkout.startswith(f"missing: no checkout at {tmp_path}") and "make setup" in checkout
    assert "MATCH" not in checkout.upper()
    assert (
        rows["engine Python"]
        == f"missing: {tmp_path}/venv/bin/python; fix: make setup  (or: zerolab engine install)"
    )
    for row in ("torch", "device", "NCCL", "DeepSpeed"):
        assert rows[row] == "unknown: no engine environment", row


def test_an_engine_at_another_commit_says_so(tmp_path, monkeypatch, capsys):
    checkout = tmp_path / "engine"
    checkout.mkdir()
    for command in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "another commit"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(checkout), *command], check=True
        )
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", str(checkout))
    monkeypatch.delenv("ZEROLAB_ENGINE_PYTHON", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["doctor"]) == 1
    rows = table_rows(capsys.readouterr().out)
    pin = load_pins().engine_commit
    assert rows["Megatron-DeepSpeed"] == f"{commit[:12]} at {checkout}: not the pinned {pin[:12]}"


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
