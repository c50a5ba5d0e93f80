"""`zerolab doctor`: what is missing, with the command that fixes it; the real engine's facts."""

from __future__ import annotations

import json

from zerolab.cli import main
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


def test_in_the_gpu_image_the_base_images_torch_meets_the_torch_pin(monkeypatch):
    from zerolab.engine.doctor import _probe_problems

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
