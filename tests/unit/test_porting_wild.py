"""What `zerolab from-command` does to launches from outside examples_deepspeed before the engine
judges them (no engine needed): a launch inside `bash -c`, its output redirections, a fork's
training script; fork flags renamed, dropped (with the code that shows they change nothing) or
refused naming the fork and the nearest equivalent; older DeepSpeed configs migrated; a
Megatron-only launch through DeepSpeed. On the engine, over the real launches:
tests/engine/test_wild_launches_engine.py."""

from __future__ import annotations

import pytest

from zerolab.errors import UserError
from zerolab.porting.command import prepared_launch
from zerolab.porting.ds_migration import migrated
from zerolab.porting.forks import translated
from zerolab.porting.from_command import read_command
from zerolab.porting.megatron_only import through_deepspeed, without_deepspeed

ARGS = ["--num-layers", "2", "--hidden-size", "64"]


def test_a_launch_inside_bash_c_with_its_output_piped_is_read_as_the_shell_runs_it():
    text = (
        'srun --jobid 7 bash -c "python -u -m torch.distributed.launch --nproc_per_node 4 --nnodes 16 '
        "/code/Megatron-DeepSpeed/pretrain_gpt.py --num-layers 2 --split '969, 30, 1'\" 2>&1 | tee log.txt"
    )
    launcher, args = read_command(text)
    assert launcher[:5] == ["srun", "--jobid", "7", "python", "-u"]
    assert launcher[-1] == "/code/Megatron-DeepSpeed/pretrain_gpt.py"
    assert args == ["--num-layers", "2", "--split", "969, 30, 1"]


def test_a_forks_own_training_script_is_named_and_read_as_pretrain_gpt():
    prepared = prepared_launch(
        "mpiexec -n 8 --ppn 4 python3 /x/pretrain_gpt_alcf.py --num-layers 2 --deepspeed",
        {},
        name="a",
        source="a",
    )
    assert (prepared.launch.nodes, prepared.launch.procs_per_node) == (2, 4)
    assert any("pretrain_gpt_alcf.py: a fork's own training script" in note for note in prepared.notes)


def test_flags_that_change_nothing_are_dropped_with_the_code_that_shows_it():
    args, notes = translated(
        [*ARGS, "--codecarbon-dir", "/x/cc", "--use-mpi", "--log-level", "info", "--seed", "1"]
    )
    assert args == [*ARGS, "--seed", "1"]
    assert [note.split(":")[0] for note in notes] == [
        "--codecarbon-dir /x/cc",
        "--use-mpi",
        "--log-level info",
    ]
    assert "megatron/global_vars.py" in notes[0] and "OMPI_COMM_WORLD_RANK" in notes[1]


def test_fork_spellings_are_renamed_to_the_pinned_engines():
    args, notes = translated(
        [*ARGS, "--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", "/tok",
         "--optimizer", "adamw", "--override-lr-scheduler", "--position-embedding-type", "rotary"]
    )  # fmt: skip
    assert args == [*ARGS, "--tokenizer-type", "HFTokenizer", "--tokenizer-model", "/tok",
                    "--optimizer", "adam", "--override-opt_param-scheduler",
                    "--use-rotary-position-embeddings"]  # fmt: skip
    assert len(notes) == 5 and "adam_w_mode True" in notes[2]


def test_a_w_and_b_name_without_a_project_logs_nowhere_and_is_left_out_saying_how_to_log():
    args, notes = translated([*ARGS, "--wandb-name", "run-1"])
    assert args == ARGS and "set logging.wandb_project and logging.wandb_name" in notes[0]
    args, _ = translated([*ARGS, "--wandb-project", "p", "--wandb-name", "run-1"])
    assert args == [*ARGS, "--wandb-project", "p", "--wandb-exp-name", "run-1"]


def test_model_features_the_pinned_engine_lacks_are_refused_each_with_its_fork_and_nearest():
    with pytest.raises(UserError) as refused:
        translated(
            [*ARGS, "--embed-layernorm", "--position-embedding-type", "alibi", "--loss-function", "entmax15"]
        )
    lines = str(refused.value).splitlines()[1:]
    assert [line.split(":")[0] for line in lines] == [
        "- --embed-layernorm", "- --position-embedding-type alibi", "- --loss-function"
    ]  # fmt: skip
    assert all("Nearest: " in line and " from " in line for line in lines)


def test_older_deepspeed_configs_are_migrated_each_change_named():
    config, notes = migrated({"bfloat16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}})
    assert config == {"bf16": {"enabled": True}}
    assert "legacy name of the bf16 block" in notes[0] and "loss_scale, initial_scale_power" in notes[1]
    config, notes = migrated({"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    assert config == {"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}} and notes == []


def test_a_megatron_only_launch_trains_through_deepspeed_with_megatrons_batches_and_loss_scaling():
    args = [*ARGS, "--micro-batch-size", "2", "--global-batch-size", "64", "--fp16", "--clip-grad", "0.5",
            "--deepspeed_config", "unused.json"]  # fmt: skip
    assert without_deepspeed(args)
    rendered, config, note = through_deepspeed(args)
    assert rendered[-1] == "--deepspeed" and "--deepspeed_config" not in rendered
    assert config == {
        "train_micro_batch_size_per_gpu": 2, "train_batch_size": 64, "gradient_clipping": 0.5,
        "zero_optimization": {"stage": 0},
        "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 32, "loss_scale_window": 1000,
                 "hysteresis": 2, "min_loss_scale": 1.0},
    }  # fmt: skip
    assert "Megatron alone" in note and "read only with --deepspeed" in note
    _, sharded, _ = through_deepspeed([*ARGS, "--bf16", "--use-distributed-optimizer"])
    assert sharded["zero_optimization"] == {"stage": 1} and sharded["bf16"] == {"enabled": True}


def test_a_config_flag_left_empty_by_the_script_is_refused_as_the_users_broken_launch():
    with pytest.raises(UserError, match=r"--deepspeed_config has no value in your launch.*empty"):
        prepared_launch(
            "deepspeed pretrain_gpt.py --num-layers 2 --deepspeed_config", {}, name="a", source="a"
        )


def test_alcfs_data_file_list_is_read_where_the_file_is_and_refused_naming_it_where_not(tmp_path):
    listed = tmp_path / "dolma.txt"
    listed.write_text(
        "0.25 /data/books-0000_text_document books\n\n0.75 /data/arxiv-0000_text_document.bin arxiv\n"
    )
    args, notes = translated([*ARGS, "--data-file-list", str(listed)])
    assert args == [
        *ARGS,
        "--data-path",
        "0.25",
        "/data/books-0000_text_document",
        "0.75",
        "/data/arxiv-0000_text_document",
    ]
    assert "2 prefixes by weight" in notes[0]
    with pytest.raises(UserError, match=r"--data-file-list /nowhere.txt: .*not on this machine"):
        translated([*ARGS, "--data-file-list", "/nowhere.txt"])
