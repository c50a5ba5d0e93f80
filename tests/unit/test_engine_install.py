"""The installer's logic without network: the engine checkout from a local git repository
(bare or not) at the pinned commit, pin checks against a real environment, and the record
that makes a second install fast."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from git_helpers import git
from rich.console import Console

from zerolab.engine.checkout import checkout_commit, ensure_checkout
from zerolab.engine.install import install, pin_mismatches
from zerolab.engine.pins import Pins
from zerolab.errors import UserError


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
