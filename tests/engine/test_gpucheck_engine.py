"""The GPU check's kit gathered for real (the engine, a git repository standing in for apex's pinned
commit, wheels from the package index), its dry run end to end over that kit, the refusals that need
it, and the engine environment's torchrun and fine-tuning model. Its other refusals and what it does
with the machine's own CUDA builds: tests/unit/test_gpucheck.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from git_helpers import git

from zerolab.engine.pins import load_pins
from zerolab.gpucheck import kit as kits
from zerolab.gpucheck.__main__ import main
from zerolab.gpucheck.check import (
    FINETUNE_MODEL,
    FINETUNE_RECIPE,
    MIN_ITERS,
    PLANNED,
    SWEEP_NAME,
    torchrun_script,
)

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def gathered(engine, tmp_path_factory) -> tuple[kits.Kit, object]:
    """A kit gathered for this Python, with a local repository as apex's pinned source (no network
    reaches apex's upstream here); the machine has numpy at another version and rich at any."""
    root = tmp_path_factory.mktemp("kit")
    apex = root / "apex-source"
    apex.mkdir()
    git("init", "-q", cwd=apex)
    (apex / "setup.py").write_text("# apex stands in\n")
    git("add", ".", cwd=apex)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "apex", cwd=apex)
    pins = replace(load_pins(), apex_repo=str(apex), apex_commit=git("rev-parse", "HEAD", cwd=apex))
    machine = {"numpy": "1.26.0", "rich": "13.0.0", "pyyaml": "6.0.1"}
    gathered = kits.gather(
        root / "kit", engine_python=engine[1], python_version=PYTHON, machine=machine, apex=True, pins=pins
    )
    return gathered, pins


def test_a_kit_holds_the_pinned_commits_and_the_wheels_the_machine_lacks(gathered):
    kit, pins = gathered
    assert kits.read_kit(kit.root, pins) == kit
    assert git("rev-parse", kits.PINNED_REF, cwd=kit.engine_git) == pins.engine_commit
    assert git("rev-parse", kits.PINNED_REF, cwd=kit.apex_git) == pins.apex_commit
    names = {kits.wheel_identity(wheel)[0]: kits.wheel_identity(wheel)[1] for wheel in kit.wheels}
    assert names["deepspeed"] == pins.python["deepspeed"] and names["numpy"] == pins.python["numpy"]
    assert {"torch", "tensorboard", "wandb", "datasets", "lm_eval", "accelerate"}.isdisjoint(
        names
    )  # the machine's, or not needed
    assert "rich" not in names and "pyyaml" not in names  # zerolab's own, by range: the machine's will do
    assert {"pydantic", "zstandard", "hjson", "transformers"} <= set(names)
    assert kit.manifest["left_out"] and kit.manifest["python"] == PYTHON
    assert not list(kit.root.parent.glob(".kit-partial-*"))


def test_the_dry_run_prints_every_step_over_the_kit_and_runs_nothing(gathered, tmp_path, monkeypatch, capsys):
    kit, pins = gathered
    monkeypatch.setattr(kits, "load_pins", lambda: pins)
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path / "home"))
    assert main(["--kit", str(kit.root), "--dry-run", "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    numbered = [line.split(" ", 1)[1].split(":")[0] for line in out.splitlines() if line[:1].isdigit()]
    # the headline figures first, the ladder with the time left; each step's allowance printed
    assert numbered == [
        "environment (45 s)",
        "data (15 s)",
        "peer (270 s)",
        "seeds (150 s)",
        "ladder (the time left, at least 45 s)",
        "report (10 s)",
    ]
    assert [name.split(" (")[0] for name in numbered] == list(PLANNED)  # named steps only when asked for
    assert f"--no-index --no-deps {kit.wheels[0]}" in out
    # the marker goes in before any install, so a failed one leaves an environment the check may reuse
    assert out.index("zerolab-gpu-check.pth") < out.index("pip install")
    assert "- write " + str(tmp_path / "home" / "venv" / "bin" / "torchrun") in out
    assert f"ZEROLAB_ENGINE_SRC={kit.engine_git} ZEROLAB_APEX_SRC={kit.apex_git}" in out
    # the engine install asks for no pin the kit does not carry (the machine is offline), builds nothing
    install = next(line for line in out.splitlines() if "engine install" in line and "$" in line)
    left_out = [name for name in kits.NOT_NEEDED if name in load_pins().python]
    assert left_out and all(f"--without {name}" in install for name in left_out)
    assert install.endswith("--no-build")
    assert "zerolab ladder gpt2_z2 hardware.procs_per_node=1 --measured 2 --rounds 2" in out
    fastest = "speed.compiled_layers=true speed.coalesced_grad_reduction=true"
    assert "gpu_vs_peer.py --cases 1.5b:0,2 124m:0 --iters 12" in out
    assert "--set speed.compiled_layers=true --set speed.coalesced_grad_reduction=true" in out
    seeds = "sweep gpt2_dp zero=z0,z1,z2,z3,z3_offload model=gpt2-124m train.micro_batch_size=16"
    seeds += f" hardware.procs_per_node=1 {fastest}"
    assert f"{seeds} train.iters={MIN_ITERS}" in out
    assert f"--name {SWEEP_NAME}" in out and "train.eval_iters=1" in out
    assert f"--results {tmp_path / 'results'}" in out
    assert not (tmp_path / "home").exists() and not (tmp_path / "results").exists()


def test_the_named_steps_run_what_they_name(gathered, tmp_path, monkeypatch, capsys):
    kit, pins = gathered
    monkeypatch.setattr(kits, "load_pins", lambda: pins)
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path / "home"))
    only = "seeds_1_5b,fsdp2,finetune"
    assert main(["--kit", str(kit.root), "--dry-run", "--only", only, "--cuda-builds"]) == 0
    out = capsys.readouterr().out
    assert "sweep gpt2_dp zero=z0,z1,z2,z3,z3_offload hardware.procs_per_node=1" in out
    # FSDP2's twins of the seed recipes beside the engine's ZeRO-0 and the peer, 124M first
    assert "gpu_vs_peer.py --cases 124m:0 fsdp2/124m:0,2,3 1.5b:0 fsdp2/1.5b:0,2,3" in out
    # the fine-tuning recipes on a random-weight GPT-2 XL (the machine has no network for OpenAI's)
    assert f"zerolab.gpucheck.finetune_model {FINETUNE_MODEL}" in out
    assert f"sweep {FINETUNE_RECIPE} zero=z0,z1,z2,z3,z3_offload hardware.procs_per_node=1" in out


def test_a_kit_without_apex_is_read_and_passes_no_apex_source(gathered, tmp_path, monkeypatch, capsys):
    kit, pins = gathered
    monkeypatch.setattr(kits, "load_pins", lambda: pins)
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path / "home"))
    bare = tmp_path / "kit"
    shutil.copytree(kit.root, bare, ignore=shutil.ignore_patterns(kits.APEX_GIT))
    manifest = {key: value for key, value in kit.manifest.items() if key != "apex"}
    (bare / kits.MANIFEST).write_text(json.dumps(manifest))
    assert kits.read_kit(bare, pins).apex_git is None
    assert main(["--kit", str(bare), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"ZEROLAB_ENGINE_SRC={bare / kits.ENGINE_GIT} MAX_JOBS" in out and "ZEROLAB_APEX_SRC" not in out


def test_a_kit_for_another_python_is_refused_with_the_command_that_makes_the_right_one(
    gathered, tmp_path, monkeypatch, capsys
):
    kit, pins = gathered
    monkeypatch.setattr(kits, "load_pins", lambda: pins)
    other = tmp_path / "other"
    other.mkdir()
    for part in (kits.ENGINE_GIT, kits.APEX_GIT):
        (other / part).mkdir()
    (other / kits.MANIFEST).write_text(json.dumps({**kit.manifest, "python": "3.99"}))
    assert main(["--kit", str(other), "--dry-run"]) == 2
    assert f"make gpu-kit DIR={other} PYTHON_VERSION={PYTHON}" in capsys.readouterr().err


def test_the_environments_torchrun_runs_the_environments_python(engine, tmp_path):
    # the machine's torchrun ran the machine's Python: every seed run died with "No module named
    # 'deepspeed'" (H200, 2026-11-25)
    _, python = engine
    script = tmp_path / "torchrun"
    script.write_text(torchrun_script(python))
    script.chmod(0o755)
    probe = "import sys; print(sys.executable)"  # the engine's Python is the one with DeepSpeed
    (tmp_path / "probe.py").write_text(probe)
    result = subprocess.run(
        [str(script), "--nproc-per-node", "1", "--no-python", str(python), str(tmp_path / "probe.py")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.split()[-1]) == python


def test_on_a_machine_without_a_gpu_the_check_refuses_before_any_step(engine, tmp_path):
    """Run by the engine's own Python, whose torch is a CPU build here."""
    home = tmp_path / "home"
    result = subprocess.run(
        [str(engine[1]), "-m", "zerolab.gpucheck"],
        capture_output=True,
        text=True,
        env={**os.environ, "ZEROLAB_HOME": str(home)},
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "is a CPU build (run the check with the Python of the machine's CUDA torch" in result.stderr
    assert "nvidia-smi sees no GPU" in result.stderr
    assert not home.exists() and result.stdout == ""


def test_the_checks_fine_tuning_model_has_the_recipes_shape(engine, tmp_path):
    # the GPT-2 XL recipes' shape, here overridden to the tiny one (the XL is 6 GB of random weights)
    out = tmp_path / "model"
    command = [sys.executable, "-m", "zerolab.gpucheck.finetune_model", str(out), "model=gpt2-tiny"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    config = json.loads((out / "config.json").read_text())
    assert (config["n_layer"], config["n_embd"], config["n_head"], config["n_positions"]) == (2, 64, 4, 128)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
