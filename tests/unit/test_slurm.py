"""The sbatch renderer: shellcheck-clean scripts, their directives, and what only a stand-in for
SLURM's srun and scontrol can show here (a second job resuming the first, pyxis images, values
with shell characters). Jobs on a real two-node SLURM: tests/cluster/test_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_helpers import launched, option, run_sbatch, shellcheck, stand_ins_bin

from zerolab import rundir
from zerolab.backends.slurm_script import SlurmOptions, render_for_job, sbatch_for_recipe
from zerolab.cli import main
from zerolab.locations import REPO_ROOT
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.naming import renamed
from zerolab.recipe.render import Launch, render

SLURM_2_NODES = ("hardware.nodes=2", "hardware.procs_per_node=4", "train.global_batch_size=64")


@pytest.fixture(autouse=True)
def engine_bin_holds_the_stand_ins(tmp_path, monkeypatch):
    """The jobs rendered here put run_sbatch's stand-ins first on PATH, as the engine's bin directory."""
    monkeypatch.setenv("ZEROLAB_ENGINE_PYTHON", str(stand_ins_bin(tmp_path) / "python"))


def job(*overrides: str, launcher: str = "torchrun", options: SlurmOptions | None = None, resume=None) -> str:
    """The sbatch script of gpt2_z1 on 2 nodes of 4 GPUs."""
    words = [*SLURM_2_NODES, f"hardware.launcher={launcher}", "hardware.backend=slurm", *overrides]
    recipe = load_recipe("gpt2_z1", words)
    options = options or SlurmOptions()
    return sbatch_for_recipe(recipe, render_for_job(recipe, options, resume), options)


def job_dir(tmp_path: Path, job_id: str) -> Path:
    """The run directory the job `job_id` wrote: logs/<run name>/slurm-<job id>."""
    (found,) = (tmp_path / "logs").glob(f"*/slurm-{job_id}")
    return found


def shown(run_dir: Path) -> str:
    """A job's run directory as the job names it: relative to the submit directory."""
    return "/".join(run_dir.parts[-3:])


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
@pytest.mark.parametrize(
    "options", [SlurmOptions(image="registry.example/zerolab:gpu"), SlurmOptions()], ids=["image", "host"]
)
def test_sbatch_is_shellcheck_clean(launcher, options, tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(job(launcher=launcher, options=options))
    result = shellcheck(path)
    assert result.returncode == 0, result.stdout


def test_directives_follow_the_render():
    script = job(options=SlurmOptions(partition="gpu", account="lab"))
    for directive in (
        "--job-name=gpt2_z1+hardware.nodes=2+hardware.procs_per_node=4+train.global_batch_size=64"
        "+hardware.launcher=torchrun",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gpus-per-node=4",
        "--partition=gpu",
        "--account=lab",
    ):
        assert f"#SBATCH {directive}\n" in script


def test_a_checkpointing_job_saves_and_a_second_job_resumes_it(tmp_path, monkeypatch, capsys):

    assert run_sbatch(job("train.save_interval=10"), tmp_path).returncode == 0
    first = job_dir(tmp_path, "4242")
    assert option(launched(first), "--save") == f"{shown(first)}/checkpoints"
    assert rundir.last_checkpoint(first) == 10
    monkeypatch.chdir(tmp_path)
    argv = ["render", "--slurm", "--resume", shown(first), "train.iters=200"]
    assert main(argv) == 0
    script = capsys.readouterr().out
    assert run_sbatch(script, tmp_path, job_id="4243").returncode == 0
    second_dir = job_dir(tmp_path, "4243")
    # a resumed run is named with its new overrides (here cut to MAX_LENGTH, ending in a hash)
    assert second_dir.parent.name == renamed(first.parent.name, ["train.iters=200"]) != first.parent.name
    second = launched(second_dir)
    assert option(second, "--load") == f"{shown(first)}/checkpoints"
    assert option(second, "--save") == f"{shown(second_dir)}/checkpoints"
    assert "--override-opt_param-scheduler" in second and option(second, "--train-iters") == "200"


def test_jobs_without_a_port_do_not_share_one_and_a_port_given_is_kept(tmp_path):
    """Two jobs on one shared node each rendezvous on their own port (from the job id), not 29500."""
    ports = []
    for job_id in ("4242", "4243"):
        assert run_sbatch(job(), tmp_path, job_id=job_id).returncode == 0
        ports.append(int(option(launched(job_dir(tmp_path, job_id)), "--master-port")))
    assert len(set(ports)) == 2 and 29500 not in ports
    assert all(20000 <= port < 32768 for port in ports)
    assert run_sbatch(job("hardware.master_port=29617"), tmp_path, job_id="4244").returncode == 0
    assert option(launched(job_dir(tmp_path, "4244")), "--master-port") == "29617"


def test_image_jobs_run_the_image_engine_and_mount_absolute_inputs(tmp_path):
    data = tmp_path / "corpora" / "owt_text_document"
    script = job(f"data.path={data}", options=SlurmOptions(image="registry.example/zerolab:gpu"))
    assert "/opt/Megatron-DeepSpeed/pretrain_gpt.py" in script
    assert "--container-image=registry.example/zerolab:gpu" in script
    assert "--container-workdir=/workspace/zerolab" in script
    assert f"{data.parent}:{data.parent}" in script


def test_host_jobs_run_the_launch_with_command_sh_environment(tmp_path):
    """This engine's bin directory first on PATH and this checkout first on PYTHONPATH: the ranks
    import the zerolab that wrote the job, whichever checkout the engine environment has installed."""
    script = job()
    assert f"\n{Launch.exports()}\n" in script
    assert f'PATH="{stand_ins_bin(tmp_path)}${{PATH:+:$PATH}}"' in script
    assert f'PYTHONPATH="{REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"' in script
    assert f"\n{Launch.exports()}\n" in render(load_recipe("cpu/tiny_z1")).script(REPO_ROOT, "a launch")


def test_values_reach_the_launcher_as_written(tmp_path):
    literal = "data/my $HOME `x` 'dir'/owt_text_document"
    result = run_sbatch(job(f"data.path={literal}", "hardware.omp_num_threads=3"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert option(launched(job_dir(tmp_path, "4242")), "--data-path") == literal


def test_render_slurm_prints_the_sbatch_of_a_shipped_recipe(repo_root, monkeypatch, capsys, tmp_path):

    monkeypatch.chdir(repo_root)
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", "/opt/Megatron-DeepSpeed")
    argv = ["render", "recipes/gpt2_z3_offload.yaml", "--slurm", "--image", "registry.example/zerolab:gpu"]
    assert main([*argv, *SLURM_2_NODES, "hardware.procs_per_node=8"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=8\n" in script
    assert '"offload_optimizer": {' in script and "--cpu-optimizer" in script
    path = tmp_path / "gpt2_z3_offload.sbatch"
    path.write_text(script)
    assert shellcheck(path).returncode == 0


@pytest.mark.parametrize(
    ("launcher", "asked_for"), [("torchrun", "hardware.master_addr"), ("deepspeed", "hardware.hostfile")]
)
def test_slurm_supplies_the_rendezvous_a_plain_multi_node_render_asks_for(
    launcher, asked_for, repo_root, monkeypatch, capsys
):

    monkeypatch.chdir(repo_root)
    argv = ["render", "recipes/gpt2_z1.yaml", *SLURM_2_NODES]
    argv.append(f"hardware.launcher={launcher}")
    assert main(argv) == 2
    assert asked_for in capsys.readouterr().err
    assert main([*argv, "--slurm"]) == 0
    assert "#SBATCH --nodes=2" in capsys.readouterr().out


def test_render_slurm_refuses_json(repo_root, monkeypatch, capsys):

    monkeypatch.chdir(repo_root)
    assert main(["render", "recipes/gpt2_z1.yaml", "--slurm", "--json", *SLURM_2_NODES]) == 2
    assert "--slurm" in capsys.readouterr().err


def test_a_cpu_job_asks_for_no_gpus_and_a_requeued_job_loads_its_own_checkpoints():
    words = ["hardware.nodes=2", "hardware.procs_per_node=1", "hardware.backend=slurm"]
    recipe = load_recipe("cpu/tiny_z1", words)
    script = sbatch_for_recipe(recipe, render_for_job(recipe, SlurmOptions(), None), SlurmOptions())
    assert "--gpus-per-node" not in script and "#SBATCH --open-mode=append\n" in script
    assert '--save "${RUN_DIR}"/checkpoints --save-interval 60 --load "${RUN_DIR}"/checkpoints' in script
    assert "--open-mode=append" in script.split("srun", 1)[1]


def test_launch_slurm_needs_sbatch_and_takes_no_run_dir(dataset, repo_root, tmp_path, monkeypatch, capsys):
    assets = repo_root / "zerolab" / "assets" / "gpt2"
    words = ["launch", "cpu/tiny_z1", f"data.path={dataset}", "hardware.nodes=2", "hardware.procs_per_node=1"]
    words += [f"data.vocab_file={assets / 'vocab.json'}", f"data.merge_file={assets / 'merges.txt'}"]
    monkeypatch.chdir(tmp_path)
    assert main([*words, "--slurm", "--run-dir", str(tmp_path / "run")]) == 2
    assert "--run-dir is not an option of --slurm" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main([*words, "--slurm"]) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
