"""The sbatch renderer: shellcheck-clean scripts that, run under a stand-in for SLURM's
srun and scontrol (no SLURM here), start the launcher with each node's rank and write
the run directory."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from zerolab.cluster.slurm import SlurmOptions, node_argv, render_sbatch
from zerolab.errors import UserError

SHELLCHECK = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "shellcheck"


@dataclass(frozen=True)
class Launch:
    """The fields of the recipe render contract (docs: contracts, `render(recipe)`)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ds_config: dict[str, Any] = field(default_factory=dict)
    nodes: int = 2
    procs_per_node: int = 4


TORCHRUN = Launch(
    argv=[
        "torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--node-rank", "0", "--master-addr", "10.1.1.1",
        "--master-port", "29500", "-m", "zerolab.engine.megatron_entry",
        "/somewhere/Megatron-DeepSpeed/pretrain_gpt.py",
        "--num-layers", "12", "--deepspeed", "--deepspeed_config", "ds_config.json", "--zero-stage", "1",
    ],
    env={"OMP_NUM_THREADS": "1"},
    ds_config={"train_batch_size": 32, "zero_optimization": {"stage": 1}},
)  # fmt: skip

DEEPSPEED = Launch(
    argv=[
        "deepspeed", "--hostfile", "hostfile", "--num_nodes", "2", "--num_gpus", "4",
        "--master_addr", "10.1.1.1",
        "--master_port", "29500", "--module", "zerolab.engine.megatron_entry", "/somewhere/pretrain_gpt.py",
        "--deepspeed", "--deepspeed_config", "ds_config.json",
    ],
)  # fmt: skip

STUBS = {
    # scontrol show hostnames NODELIST
    "scontrol": 'printf "gpu-a\\ngpu-b\\n"\n',
    # srun OPTIONS... bash -c CMD: run CMD once as node 1, output to --output's file
    "srun": (
        "out=/dev/stdout\n"
        'while [[ "$1" != bash ]]; do case "$1" in --output=*) out="${1#--output=}";; esac; shift; done\n'
        'SLURM_NODEID=1 "$@" >> "$out" 2>&1\n'
    ),
    "torchrun": 'echo "torchrun $*"; exit "${LAUNCH_EXIT:-0}"\n',
    "deepspeed": 'echo "deepspeed $*"; exit "${LAUNCH_EXIT:-0}"\n',
}


def run_sbatch(script: str, tmp_path: Path, launch_exit: int = 0) -> subprocess.CompletedProcess[str]:
    """Run a rendered sbatch script in tmp_path with stand-ins for SLURM and the launchers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        stub = bin_dir / name
        stub.write_text("#!/usr/bin/env bash\n" + body)
        stub.chmod(0o755)
    (tmp_path / "job.sbatch").write_text(script)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu-[a-b]",
        "LAUNCH_EXIT": str(launch_exit),
    }
    return subprocess.run(["bash", "job.sbatch"], cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("launch", [TORCHRUN, DEEPSPEED], ids=["torchrun", "deepspeed"])
@pytest.mark.parametrize(
    "options", [SlurmOptions(image="registry.example/zerolab:gpu"), SlurmOptions()], ids=["image", "host"]
)
def test_sbatch_is_shellcheck_clean(launch, options, tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(render_sbatch(launch, name="gpt2_z1", options=options))
    result = subprocess.run([str(SHELLCHECK), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_directives_follow_the_render():
    script = render_sbatch(TORCHRUN, name="gpt2_z1", options=SlurmOptions(partition="gpu", account="lab"))
    for directive in (
        "--job-name=gpt2_z1",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gpus-per-node=4",
        "--partition=gpu",
        "--account=lab",
    ):
        assert f"#SBATCH {directive}\n" in script


def test_torchrun_job_runs_each_node_with_its_rank_and_writes_the_run_dir(tmp_path):
    script = render_sbatch(
        TORCHRUN, name="gpt2_z1", options=SlurmOptions(), facts={"name": "gpt2_z1", "zero_stage": 1}
    )
    result = run_sbatch(script, tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "logs" / "gpt2_z1" / "slurm-4242"
    launched = shlex.split((run_dir / "train.log").read_text())
    assert launched[:5] == ["torchrun", "--node-rank", "1", "--master-addr", "gpu-a"]
    assert launched.count("--node-rank") == 1 and "10.1.1.1" not in launched
    assert launched[launched.index("--deepspeed_config") + 1] == "logs/gpt2_z1/slurm-4242/ds_config.json"
    assert json.loads((run_dir / "ds_config.json").read_text()) == TORCHRUN.ds_config
    assert json.loads((run_dir / "run.json").read_text()) == {"name": "gpt2_z1", "zero_stage": 1}
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"


def test_deepspeed_job_uses_a_hostfile_of_the_allocation_without_ssh(tmp_path):
    result = run_sbatch(render_sbatch(DEEPSPEED, name="gpt2_z3", options=SlurmOptions()), tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "logs" / "gpt2_z3" / "slurm-4242"
    launched = shlex.split((run_dir / "train.log").read_text())
    assert launched[:8] == [
        "deepspeed", "--hostfile", "logs/gpt2_z3/slurm-4242/hostfile", "--no_ssh",
        "--node_rank", "1", "--master_addr", "gpu-a",
    ]  # fmt: skip
    assert (run_dir / "hostfile").read_text() == "gpu-a slots=4\ngpu-b slots=4\n"


def test_failed_launch_is_recorded_and_passed_on(tmp_path):
    result = run_sbatch(
        render_sbatch(TORCHRUN, name="gpt2_z1", options=SlurmOptions()), tmp_path, launch_exit=7
    )
    assert result.returncode == 7
    status = json.loads((tmp_path / "logs" / "gpt2_z1" / "slurm-4242" / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("failed", 7)


def test_image_jobs_run_the_image_engine_in_the_repository_root():
    script = render_sbatch(
        TORCHRUN, name="gpt2_z1", options=SlurmOptions(image="registry.example/zerolab:gpu")
    )
    assert "/opt/Megatron-DeepSpeed/pretrain_gpt.py" in script and "/somewhere" not in script
    assert "--container-image=registry.example/zerolab:gpu" in script
    assert "--container-workdir=/workspace/zerolab" in script


def test_host_jobs_put_the_engine_bin_first_on_path():
    script = render_sbatch(
        TORCHRUN, name="gpt2_z1", options=SlurmOptions(engine_bin="/shared/zerolab/venv/bin")
    )
    assert 'export PATH=/shared/zerolab/venv/bin:"${PATH}"' in script


def test_environment_reaches_the_launcher_quoted():
    launch = Launch(argv=TORCHRUN.argv, env={"NCCL_SOCKET_IFNAME": "^lo,docker0"}, nodes=2, procs_per_node=4)
    argv = node_argv(launch.argv)
    assert argv[0] == "torchrun"
    script = render_sbatch(launch, name="x", options=SlurmOptions())
    assert "NCCL_SOCKET_IFNAME=^lo,docker0" in script


def test_unknown_launcher_is_a_user_error():
    with pytest.raises(UserError, match="torchrun or deepspeed"):
        node_argv(["mpirun", "python", "pretrain_gpt.py"])


SLURM_2_NODES = ("hardware.nodes=2", "hardware.procs_per_node=8")


def test_render_slurm_prints_the_sbatch_of_a_shipped_recipe(repo_root, monkeypatch, capsys, tmp_path):
    from zerolab.cli import main

    monkeypatch.chdir(repo_root)
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", "/opt/Megatron-DeepSpeed")
    argv = ["render", "recipes/gpt2_z3_offload.yaml", "--slurm", "--image", "registry.example/zerolab:gpu"]
    assert main([*argv, *SLURM_2_NODES, "train.global_batch_size=64"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=8\n" in script
    assert '"offload_optimizer": {' in script and "--cpu-optimizer" in script
    path = tmp_path / "gpt2_z3_offload.sbatch"
    path.write_text(script)
    assert subprocess.run([str(SHELLCHECK), str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize(
    ("launcher", "asked_for"), [("torchrun", "hardware.master_addr"), ("deepspeed", "hardware.hostfile")]
)
def test_slurm_supplies_the_rendezvous_a_plain_multi_node_render_asks_for(
    launcher, asked_for, repo_root, monkeypatch, capsys
):
    from zerolab.cli import main

    monkeypatch.chdir(repo_root)
    argv = ["render", "recipes/gpt2_z1.yaml", *SLURM_2_NODES, "train.global_batch_size=64"]
    argv.append(f"hardware.launcher={launcher}")
    assert main(argv) == 2
    assert asked_for in capsys.readouterr().err
    assert main([*argv, "--slurm"]) == 0
    assert "#SBATCH --nodes=2" in capsys.readouterr().out


def test_render_slurm_refuses_json(repo_root, monkeypatch, capsys):
    from zerolab.cli import main

    monkeypatch.chdir(repo_root)
    assert main(["render", "recipes/gpt2_z1.yaml", "--slurm", "--json", *SLURM_2_NODES]) == 2
    assert "--slurm" in capsys.readouterr().err
