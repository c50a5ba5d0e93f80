"""`zerolab doctor` without the engine: what is missing, with the command that fixes it, and no
placeholder stated as a fact; an engine at another commit; the GPU image's torch against the pin.
The real engine's facts: tests/engine/test_engine_doctor.py."""

from __future__ import annotations

import json
import subprocess

from doctor_helpers import table_rows

from zerolab.cli import main
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
