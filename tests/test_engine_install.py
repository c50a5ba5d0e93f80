"""The installer's logic without network: the engine checkout from a local git repository
(bare or not) at the pinned commit, pin checks against a real environment, and the record
that makes a second install fast."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from zerolab.engine.checkout import checkout_commit, ensure_checkout
from zerolab.engine.install import install, pin_mismatches
from zerolab.engine.paths import torch_extensions_dir
from zerolab.engine.pins import Pins, load_pins
from zerolab.errors import UserError


def git(*args: str, cwd: Path) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout.strip()


@pytest.fixture
def engine_repo(tmp_path) -> tuple[Path, str, str]:
    """A local git repository with two commits; returns (bare clone, first sha, second sha)."""
    work = tmp_path / "upstream"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    git("config", "user.email", "test@example.com", cwd=work)
    git("config", "user.name", "test", cwd=work)
    (work / "pretrain_gpt.py").write_text("print('first')\n")
    git("add", ".", cwd=work)
    git("commit", "-qm", "first", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "pretrain_gpt.py").write_text("print('second')\n")
    git("commit", "-qam", "second", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "mirror.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return bare, first, second


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def ensure_engine_checkout(target: Path, commit: str, source: str) -> bool:
    return ensure_checkout(
        target, commit, source, what="Megatron-DeepSpeed", variable="ZEROLAB_ENGINE_SRC", say=quiet().print
    )


@pytest.mark.parametrize("source_kind", ["bare", "checkout"])
def test_checkout_at_the_pinned_commit_from_a_local_repository(tmp_path, engine_repo, source_kind):
    bare, first, _ = engine_repo
    source = bare if source_kind == "bare" else tmp_path / "upstream"
    target = tmp_path / "engine" / "Megatron-DeepSpeed-x"
    assert ensure_engine_checkout(target, first, str(source)) is True
    assert checkout_commit(target) == first
    assert (target / "pretrain_gpt.py").read_text() == "print('first')\n"
    assert ensure_engine_checkout(target, first, str(source)) is False  # already there
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no staging left behind


def test_an_existing_checkout_at_another_commit_is_refused_not_replaced(tmp_path, engine_repo):
    bare, first, second = engine_repo
    target = tmp_path / "engine"
    ensure_engine_checkout(target, second, str(bare))
    with pytest.raises(
        UserError, match=f"is at commit {second}, but pins.toml pins Megatron-DeepSpeed at {first}"
    ):
        ensure_engine_checkout(target, first, str(bare))
    assert checkout_commit(target) == second


def test_a_missing_source_or_commit_is_a_clear_error(tmp_path, engine_repo):
    bare, _, _ = engine_repo
    with pytest.raises(UserError, match=r"ZEROLAB_ENGINE_SRC=.*no such directory"):
        ensure_engine_checkout(tmp_path / "e1", "0" * 40, str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="failed"):
        ensure_engine_checkout(tmp_path / "e2", "0" * 40, str(bare))
    assert not (tmp_path / "e2").exists()


def test_pin_mismatches_reads_the_real_environment():
    have = pytest.__version__
    python = Path(sys.executable)
    assert pin_mismatches(python, {"pytest": have}) == {}
    assert pin_mismatches(python, {"pytest": "0.0.1"}) == {"pytest": have}
    assert pin_mismatches(python, {"no-such-distribution-zerolab": "1.0"}) == {
        "no-such-distribution-zerolab": None
    }


def test_install_records_what_it_set_up_and_a_second_run_does_nothing(
    tmp_path, engine_repo, monkeypatch, capsys
):
    bare, first, _ = engine_repo
    monkeypatch.setenv("ZEROLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", str(tmp_path / "home" / "engine"))
    monkeypatch.setenv("ZEROLAB_ENGINE_PYTHON", sys.executable)  # this venv: pins below are met
    monkeypatch.setenv("ZEROLAB_ENGINE_SRC", str(bare))
    pins = Pins(
        engine_repo="https://example.invalid/engine.git",
        engine_commit=first,
        python={"pytest": pytest.__version__},
        apex_repo="https://example.invalid/apex.git",
        apex_commit="0" * 40,
    )
    install(pins, prebuild=False, console=quiet())
    record = json.loads((tmp_path / "home" / "install.json").read_text())
    assert record["engine_commit"] == first
    assert record["source"] == str(bare)
    assert record["python_pins"] == {"pytest": pytest.__version__}
    assert checkout_commit(tmp_path / "home" / "engine") == first

    second = Console(file=io.StringIO(), width=200)
    install(pins, prebuild=False, console=second)
    assert "engine already set up" in second.file.getvalue()
    capsys.readouterr()
    install(pins, prebuild=False)  # its own console, on stderr (80 columns here): a path is never cut
    (said,) = [line for line in capsys.readouterr().err.splitlines() if "engine already set up" in line]
    assert said.endswith(str(tmp_path / "home" / "engine"))

    fewer = replace(pins, python={})
    third = Console(file=io.StringIO(), width=200)
    install(fewer, prebuild=False, console=third)  # other pins than recorded: checks every step again
    assert "every pin already installed" in third.file.getvalue()
    assert json.loads((tmp_path / "home" / "install.json").read_text())["python_pins"] == {}

    # an offline machine's kit carries no wheel of a pin: --without leaves it out, by name only
    absent = replace(pins, python={"pytest": pytest.__version__, "zerolab-no-such-package": "1.0"})
    fourth = Console(file=io.StringIO(), width=200)
    install(absent, without=("zerolab-no-such-package",), prebuild=False, console=fourth)
    assert "zerolab-no-such-package: left out (--without)" in fourth.file.getvalue()
    assert json.loads((tmp_path / "home" / "install.json").read_text())["python_pins"] == {
        "pytest": pytest.__version__
    }
    with pytest.raises(UserError, match=r"--without wandb: not a pin of zerolab/engine/pins\.toml"):
        install(absent, without=("wandb",), prebuild=False, console=quiet())


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


def test_a_fetch_that_fails_names_the_local_source_variable_and_the_commit(tmp_path, engine_repo, capfd):
    # no network access to the upstream (a URL that cannot be reached): the error names the way
    # round, ZEROLAB_ENGINE_SRC, and the commit that local repository must hold
    bare, first, _ = engine_repo
    unreachable = f"file://{tmp_path}/offline/Megatron-DeepSpeed.git"
    with pytest.raises(UserError) as refused:
        ensure_engine_checkout(tmp_path / "e1", first, unreachable)
    message = str(refused.value)
    assert f"fetching Megatron-DeepSpeed {first} from {unreachable} failed" in message
    assert "no network access to it?" in message
    assert "`ZEROLAB_ENGINE_SRC=/path/to/Megatron-DeepSpeed.git make demo`" in message
    assert "a local clone or bare repository of Megatron-DeepSpeed holding commit " + first in message
    assert not (tmp_path / "e1").exists() and list(tmp_path.glob(".e1-*")) == []
    # the local repository named by the variable lacks the commit: it says so, and which
    missing = "1" * 40
    with pytest.raises(UserError) as refused:
        ensure_engine_checkout(tmp_path / "e2", missing, str(bare))
    message = str(refused.value)
    assert f"ZEROLAB_ENGINE_SRC={bare}: fetching Megatron-DeepSpeed {missing} from it failed" in message
    assert "it holds no such commit" in message
    assert f"holding commit {missing}" in message
    capfd.readouterr()
