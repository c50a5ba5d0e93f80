"""`make setup` on this CPU machine, for real: the dataset helpers and the CPU ops compiled, the CUDA
steps skipped. The installer's logic without network: tests/unit/test_engine_install.py."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from git_helpers import git
from rich.console import Console

from zerolab.engine.install import install
from zerolab.engine.paths import torch_extensions_dir
from zerolab.engine.pins import load_pins


def test_setup_on_a_cpu_machine_compiles_the_helpers_and_cpu_ops_and_skips_the_cuda_steps(
    engine, tmp_path, monkeypatch
):
    engine_dir, engine_python = engine
    # An engine repository holding the real engine's parts that setup compiles.
    upstream = tmp_path / "upstream"
    (upstream / "megatron" / "data").mkdir(parents=True)
    for name in ("Makefile", "helpers.cpp"):
        shutil.copy(engine_dir / "megatron" / "data" / name, upstream / "megatron" / "data")
    shutil.copy(engine_dir / "pretrain_gpt.py", upstream)
    git("init", "-q", "-b", "main", cwd=upstream)
    git("add", ".", cwd=upstream)
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "engine parts", cwd=upstream)
    # An environment that reads the engine environment's packages (the shared one stays
    # untouched), and a copy of DeepSpeed's CPU ops as built for it.
    venv = tmp_path / "venv"
    subprocess.run([str(engine_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    engine_site = next(engine_python.parent.parent.glob("lib/python3*/site-packages"))
    (next(venv.glob("lib/python3*/site-packages")) / "engine-packages.pth").write_text(f"{engine_site}\n")
    shutil.copytree(torch_extensions_dir(), tmp_path / "torch_extensions")
    for name, value in {
        "ZEROLAB_HOME": tmp_path / "home",
        "ZEROLAB_ENGINE_DIR": tmp_path / "home" / "engine",
        "ZEROLAB_ENGINE_PYTHON": venv / "bin" / "python",
        "ZEROLAB_ENGINE_SRC": upstream,
        "TORCH_EXTENSIONS_DIR": tmp_path / "torch_extensions",
    }.items():
        monkeypatch.setenv(name, str(value))
    console = Console(file=io.StringIO(), width=300)

    install(replace(load_pins(), engine_commit=git("rev-parse", "HEAD", cwd=upstream)), console=console)

    out = console.file.getvalue()
    record = json.loads((tmp_path / "home" / "install.json").read_text())
    assert record["cuda"]["needed"] is False and "the engine trains on CPU" in record["cuda"]["reason"]
    assert (record["data_helpers"]["ok"], record["data_helpers"]["workaround"]) == (True, None)
    assert Path(record["data_helpers"]["module"]).is_file()
    assert "6/9 Megatron's dataset helpers\n" in out
    skipped = f"skipped: {record['cuda']['reason']}"
    assert f"7/9 apex's extensions: {skipped}" in out
    assert f"8/9 Megatron's fused kernels: {skipped}" in out
    built = tmp_path / "torch_extensions"
    assert f"9/9 DeepSpeed's CPU ops\n  deepspeed_shm_comm, cpu_adam already built in {built}" in out
    assert not (tmp_path / "home" / "apex").exists()
