"""The parts of zerolab.porting.from_command that need no engine, and the reading of a log's
launch (zerolab.logs.config_dump.read_launch); the port itself: tests/engine/test_porting_upstream.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerolab.cli import main
from zerolab.errors import UserError
from zerolab.logs.config_dump import read_launch
from zerolab.porting.from_command import _reads_aio, _remainder, groups, read_command
from zerolab.porting.layout import launch_layout


def test_a_command_line_is_split_at_pretrain_gpt_and_its_flags_grouped():
    launcher, args = read_command(
        "NCCL_DEBUG=1 deepspeed --num_gpus 4 \\\n  ../pretrain_gpt.py --num-layers 2 "
        "--data-path 0.5 a 0.5 b --fp16 --lr=1e-4\n"
    )
    assert launcher == ["NCCL_DEBUG=1", "deepspeed", "--num_gpus", "4", "../pretrain_gpt.py"]
    assert groups(args) == [
        ("--num-layers", ["2"]),
        ("--data-path", ["0.5", "a", "0.5", "b"]),
        ("--fp16", []),
        ("--lr", ["1e-4"]),
    ]
    assert _ranks(launcher) == (1, 4)
    assert _ranks(["deepspeed", "pretrain_gpt.py"]) == (1, 8)
    assert _ranks(["torchrun", "--nnodes=2", "--nproc_per_node", "2", "pretrain_gpt.py"]) == (2, 2)


def _ranks(launcher: list[str], text: str = "", **given: int) -> tuple[int, int]:
    layout = launch_layout(launcher, text, **given)
    return layout.nodes, layout.procs_per_node


@pytest.mark.parametrize(
    ("command", "directives", "ranks"),
    [
        ("mpiexec -n 8 --ppn 4 --depth=16 --cpu-bind depth python3 pretrain_gpt.py", "", (2, 4)),
        ("mpirun -np 16 -npernode 4 -x PATH python pretrain_gpt.py", "", (4, 4)),
        ("mpirun -np 8 --map-by ppr:4:node python pretrain_gpt.py", "", (2, 4)),
        ("jsrun --nrs 48 --tasks_per_rs 1 --gpu_per_rs 1 --rs_per_host 6 python pretrain_gpt.py", "", (8, 6)),
        ("jsrun -n 8 -a 6 -g 6 -r 1 python pretrain_gpt.py", "", (8, 6)),
        ("srun python -m torch.distributed.run --nproc_per_node 8 --nnodes 48 pretrain_gpt.py", "", (48, 8)),
        (
            "srun python -u -m torch.distributed.launch --nproc_per_node 4 pretrain_gpt.py",
            "#SBATCH --nodes=16",
            (16, 4),
        ),
        ("srun -N 3 torchrun --nproc-per-node 4 pretrain_gpt.py", "", (3, 4)),
        ("srun --ntasks-per-node 8 python pretrain_gpt.py", "#SBATCH -N 4", (4, 8)),
        ("srun --ntasks 16 --nodes 2 python pretrain_gpt.py", "", (2, 8)),
        ("aprun -n 64 -N 8 python pretrain_gpt.py", "", (8, 8)),
        ("deepspeed --num_gpus 8 --num_nodes 2 pretrain_gpt.py", "", (2, 8)),
        ("deepspeed --include worker-0:0,1@worker-1:0,1 pretrain_gpt.py", "", (2, 2)),
        ("deepspeed --hostfile hostfile pretrain_gpt.py", "#PBS -l select=4:system=polaris", (4, 8)),
        ("torchrun --nnodes 1:4 --nproc_per_node 2 pretrain_gpt.py", "", (4, 2)),
        ("python pretrain_gpt.py", "", (1, 1)),
        ("mpiexec -n 12 python pretrain_gpt.py", "", (3, 4)),
    ],
)
def test_the_world_size_is_read_from_each_launcher(command, directives, ranks):
    """As each launcher counts them (the last: --gpus-per-node 4, mpiexec naming no per-node count)."""
    gpus = {"gpus_per_node": 4} if command.startswith("mpiexec -n 12") else {}
    launcher, _ = read_command(command)
    assert _ranks(launcher, directives, **gpus) == ranks


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            "deepspeed --hostfile hostfile pretrain_gpt.py",
            r"--hostfile hostfile: .*cannot read: give --nodes N",
        ),
        ("mpiexec --ppn 4 python pretrain_gpt.py", r"names no count of ranks.*give --nodes N"),
        ("mpiexec -n '' --ppn 4 python pretrain_gpt.py", r"-n '': not a count.*shell expression"),
        ("mpirun -np 10 -npernode 4 python pretrain_gpt.py", r"10 ranks are not whole nodes"),
    ],
)
def test_a_launch_whose_ranks_cannot_be_known_asks_for_them(command, message):
    launcher, _ = read_command(command)
    with pytest.raises(UserError, match=message):
        launch_layout(launcher)


def test_nodes_and_gpus_per_node_given_override_what_is_read():
    launcher, _ = read_command("deepspeed --hostfile hostfile pretrain_gpt.py")
    assert _ranks(launcher, nodes=6, gpus_per_node=4) == (6, 4)
    launcher, _ = read_command("torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py")
    assert _ranks(launcher, nodes=4) == (4, 8)


def test_a_value_before_any_flag_is_refused():
    with pytest.raises(UserError, match="before any --flag"):
        groups(["2", "--num-layers"])


def test_what_a_recipe_key_renders_is_taken_out_of_the_config_and_the_rest_kept():
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 1, "sub_group_size": 5}, "aio": {"x": 1}}
    consumed = {"train_batch_size", "zero_optimization.stage"}
    assert _remainder(config, consumed) == {"zero_optimization": {"sub_group_size": 5}, "aio": {"x": 1}}


def test_the_aio_block_is_read_only_by_an_nvme_offload_or_a_checkpoint_writer():
    cpu = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "aio": {}}
    assert not _reads_aio(cpu)
    assert _reads_aio({"zero_optimization": {"offload_param": {"device": "nvme"}}})
    assert _reads_aio({"checkpoint": {"writer": {"type": "fast"}}})


LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def test_a_logs_launch_is_its_first_argument_dump_as_printed_and_the_config_deepspeed_printed():
    logged = read_launch(LOGS / "cpu-engine" / "bf16_z1.log")
    printed = logged.arguments
    assert (printed["num_layers"], printed["lr"], printed["bf16"]) == ("2", "0.0001", "True")
    assert printed["data_path"] == "['/data/fixed_text_document']"  # a list as Megatron printed it
    assert printed["local_rank"] == "None" and printed["params_dtype"] == "torch.bfloat16"
    assert logged.ds_config == {
        "train_batch_size": 8,
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 5,
        "gradient_clipping": 1.0,
        "fp16": {"enabled": False},
        "bf16": {"enabled": True},
        "wall_clock_breakdown": False,
        "zero_optimization": {"stage": 1},
        "log_level": "info",
    }
    old = read_launch(LOGS / "real" / "megatronlm_2021-pp16-all-skipped-truncated.log")
    assert old.arguments["pipeline_model_parallel_size"] == "16" and old.ds_config == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "launch.sh holds no command (only blank lines or comments)"),
        ("# deepspeed pretrain_gpt.py\n\n", "launch.sh holds no command"),
        ('deepspeed pretrain_gpt.py --data-path "data/my corpus\n', "launch.sh: no closing quotation"),
    ],
    ids=["empty", "comments only", "an unclosed quote"],
)
def test_a_command_file_the_shell_could_not_run_is_refused_before_the_engine_is_asked(
    text, expected, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    Path("launch.sh").write_text(text)
    assert main(["from-command", "launch.sh", "--out", "ported.yaml"]) == 2
    said = capsys.readouterr().err
    assert expected in said and "engine" not in said
    assert not Path("ported.yaml").exists()


def test_a_node_of_no_ranks_is_refused(tmp_path, capsys):
    (tmp_path / "launch.sh").write_text("deepspeed pretrain_gpt.py --num-layers 2\n")
    assert main(["from-command", str(tmp_path / "launch.sh"), "--gpus-per-node", "0"]) == 2
    assert "--gpus-per-node 0: give the ranks a node runs, at least 1" in capsys.readouterr().err


def test_a_log_without_an_argument_dump_or_with_a_cut_one_is_refused_naming_file_and_line(tmp_path, capsys):
    with pytest.raises(UserError, match=r"no_dump.log: no argument dump"):
        read_launch(
            _copy(LOGS / "real" / "deepspeed_hf-trainer-zero2-throughput.log", tmp_path / "no_dump.log")
        )
    cut = _copy(LOGS / "cpu-engine" / "bf16_z1.log", tmp_path / "cut.log", lines=200)
    with pytest.raises(UserError, match=r"cut.log:51: the argument dump that starts here has no `end of"):
        read_launch(cut)
    assert main(["from-command", "--log", str(cut)]) == 2
    assert "cut.log:51: the argument dump" in capsys.readouterr().err
    assert main(["from-command", "--log", str(tmp_path / "absent.log")]) == 2
    assert "absent.log: cannot read the log" in capsys.readouterr().err
    assert main(["from-command"]) == 2
    assert "a COMMAND_FILE, or --log LOG" in capsys.readouterr().err


def test_a_log_whose_deepspeed_printed_no_config_asks_for_one(tmp_path, capsys):
    log = LOGS / "real" / "megatronlm_2021-pp16-all-skipped-truncated.log"
    assert main(["from-command", "--log", str(log)]) == 2
    assert "DeepSpeed printed no config in it" in capsys.readouterr().err


def _copy(source: Path, target: Path, lines: int | None = None) -> Path:
    text = source.read_text(errors="replace").splitlines(keepends=True)
    target.write_text("".join(text[:lines]))
    return target
