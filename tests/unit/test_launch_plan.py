"""The one launch plan and the backends behind it: a launch renders once, into the run directory
and with the port it then uses; --slurm is hardware.backend=slurm; each backend's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerolab.backends import local
from zerolab.backends.base import Backend
from zerolab.backends.driver import run
from zerolab.backends.hostfile import HostfileBackend
from zerolab.backends.local import LocalBackend
from zerolab.backends.registry import BACKENDS, backend_named
from zerolab.backends.slurm import SlurmBackend
from zerolab.cli import main
from zerolab.errors import UserError
from zerolab.launch.plan import plan
from zerolab.recipe.compose import load_recipe
from zerolab.rundir import Status, write_status


def test_a_launch_renders_once_into_the_directory_it_then_makes(tmp_path, monkeypatch):
    renders: list[str] = []
    real = local.render

    def counting(recipe, **kwargs):
        renders.append(kwargs["run_dir"])
        return real(recipe, **kwargs)

    launched: list[list[str]] = []

    def training(run_dir, argv, env, cwd, **_):
        launched.append(argv)
        return run_dir

    def finished(run_dir):
        return write_status(run_dir, Status(state="completed", exit_code=0))

    monkeypatch.setattr(local, "render", counting)
    monkeypatch.setattr(local, "start", training)
    monkeypatch.setattr(local, "finish", finished)
    monkeypatch.setattr(local, "check_local_gpus", lambda recipe: None)
    monkeypatch.setattr(LocalBackend, "problems", lambda self, recipe, engine_required=True: [])
    monkeypatch.setattr("zerolab.launch.plan.refuse_missing_inputs", lambda recipe, action: None)
    planned = plan(["cpu/tiny_z1"], logs_root=tmp_path)
    assert planned.run_dir is not None and not planned.run_dir.exists()
    assert renders == [str(planned.run_dir)]
    port = planned.facts.master_port
    assert planned.launch.argv[planned.launch.argv.index("--master-port") + 1] == str(port)
    directory, status = run(planned, echo=lambda text: None)
    assert directory == planned.run_dir and status.state == "completed"
    assert renders == [str(planned.run_dir)]  # nothing rendered again once the directory exists
    assert launched[0][1:] == planned.launch.argv[1:]


def test_slurm_flag_is_the_backend_field(capsys):
    words = ["render", "cpu/tiny_z1", "hardware.nodes=2", "hardware.procs_per_node=1"]
    assert main([*words, "--slurm"]) == 0
    flagged = capsys.readouterr().out
    assert main([*words, "hardware.backend=slurm"]) == 0
    assert capsys.readouterr().out == flagged
    assert "#SBATCH --nodes=2" in flagged and '"${SLURM_NODEID}"' in flagged


def test_the_registry_names_each_backend_the_field_allows():
    assert set(BACKENDS) == {"local", "hostfile", "slurm"}
    assert isinstance(backend_named("local"), LocalBackend)
    assert isinstance(backend_named("hostfile"), HostfileBackend)
    assert isinstance(backend_named("slurm"), SlurmBackend)
    with pytest.raises(UserError, match="no such backend"):
        backend_named("kubernetes")


def test_every_backend_writes_submits_follows_and_cancels_as_the_docs_show():
    methods = [name for name, value in vars(Backend).items() if callable(value) and not name.startswith("_")]
    assert methods == [
        "problems",
        "launched",
        "run_dir",
        "render",
        "job",
        "write",
        "submit",
        "follow",
        "cancel",
    ]
    shown = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()
    for method in methods:
        assert f"    def {method}(self, " in shown, method
    for name in BACKENDS:
        backend = backend_named(name)
        for method in methods:
            assert callable(getattr(backend, method, None)), (name, method)


def test_the_hostfile_backend_needs_the_deepspeed_launcher_and_a_hostfile(monkeypatch):
    monkeypatch.setattr(LocalBackend, "problems", lambda self, recipe, engine_required=True: [])
    recipe = load_recipe("cpu/tiny_z1", ["hardware.backend=hostfile"])
    (problem,) = HostfileBackend().problems(recipe)
    assert "hardware.launcher=deepspeed and hardware.hostfile" in problem
