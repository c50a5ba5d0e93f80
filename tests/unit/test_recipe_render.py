"""Rendering: golden renders of every shipped recipe, and the rules that tie the
Megatron arguments, the environment and the DeepSpeed config to one set of numbers.

Update the golden files after an intended change with
`ZEROLAB_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_recipe_render.py` and review the diff."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from zerolab.cli import main
from zerolab.contracts import SWITCHES
from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.facts import run_facts
from zerolab.recipe.job import check_inputs, train_iters
from zerolab.recipe.render import render

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "recipes"
SHIPPED = sorted(
    str(p.relative_to(REPO / "recipes").with_suffix("")) for p in (REPO / "recipes").rglob("*.yaml")
)
PRETRAINING = [name for name in SHIPPED if not name.startswith("finetune/") and "_fsdp2_" not in name]
"""The shipped recipes that launch the engine's pretrain_gpt.py (fine-tuning's: test_finetune_recipes;
FSDP2's: test_fsdp2)."""
FIXTURE_PREFIX = "tests/fixtures/recipe-data/dolly151_text_document"
ENGINE_DIR = "/opt/Megatron-DeepSpeed"


@pytest.fixture(autouse=True)
def neutral_engine_dir(monkeypatch):
    """Golden renders hold the image's engine path, never this machine's."""
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", ENGINE_DIR)


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_every_recipe_has_a_golden_render():
    assert len(SHIPPED) == 67 and len(PRETRAINING) == 49
    assert sorted(p.stem.replace("__", "/") for p in GOLDEN.glob("*.json")) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_golden_render(name):
    rendered = render(load_recipe(name)).as_json()
    golden = GOLDEN / f"{name.replace('/', '__')}.json"
    if os.environ.get("ZEROLAB_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(rendered, indent=2) + "\n")
    assert rendered == json.loads(golden.read_text())


def test_seed_study_recipes_differ_only_in_zero():
    def without_zero(name: str) -> dict:
        dumped = load_recipe(name).model_dump()
        dumped.pop("zero")
        dumped.pop("description")
        dumped["base"] = [b for b in dumped["base"] if not b.startswith("zero/")]
        return dumped

    for family in ("gpt2_{}", "cpu/tiny_{}"):
        variants = [family.format(v) for v in ("dp", "z1", "z2", "z3", "z3_offload")]
        reference = without_zero(variants[0])
        assert all(without_zero(v) == reference for v in variants[1:])
        stages = [load_recipe(v).zero.stage for v in variants]
        assert stages == [0, 1, 2, 3, 3]


CONTINUED = [name for name in SHIPPED if name.startswith("continued/")]


@pytest.mark.parametrize("name", CONTINUED)
def test_a_continued_recipe_is_its_seed_setup_starting_from_weights(name):
    """recipes/continued/gpt2_SIZE_DATA_SETUP is recipes/gpt2_SETUP (its CPU twin tiny_wikitext_SETUP
    is cpu/tiny_SETUP) with another model, data and train block and the init block's weights."""
    continued = load_recipe(name)
    stem = name.rpartition("/")[2]
    seed = (
        f"cpu/tiny_{stem.split('_', 2)[2]}"
        if name.startswith("continued/cpu/")
        else (f"gpt2_{stem.split('_', 3)[3]}")
    )
    blocks = dict(entry.split("/") for entry in continued.base)
    swaps = [f"{section}={blocks[section]}" for section in ("model", "data", "train")]
    init = [
        f"model.init_from={continued.model.init_from}",
        f"model.import_command={continued.model.import_command}",
    ]
    from_weights = load_recipe(seed, [*swaps, *init])
    # the import command writes the folder, padded as the recipe pads, with the recipe's layout
    words = shlex.split(continued.model.import_command.rpartition("&&")[2])
    assert words[:2] == ["zerolab", "import"] and option(words, "--out") == continued.model.init_from
    assert (
        int(option(words, "--make-vocab-size-divisible-by")) == continued.model.make_vocab_size_divisible_by
    )
    layouts = [words[i + 1] for i, word in enumerate(words) if word == "--parallel"] or ["1x1"]
    assert f"{continued.parallel.tensor}x{continued.parallel.pipeline}" in layouts
    assert continued.model_dump(exclude={"description", "base"}) == from_weights.model_dump(
        exclude={"description", "base"}
    )


def test_a_swapped_in_block_replaces_its_sections_block_and_keeps_the_recipes_own_keys():
    # dolly's min_documents (15,000) does not follow the swap to the 151-document sample: found
    # when the GPU check's sweep of gpt2_dp data=dolly-sample refused the sample (H200, 2026-11-25)
    swapped = load_recipe("gpt2_dp", ["data=dolly-sample"])
    assert swapped.data.name == "dolly-sample" and swapped.data.min_documents is None
    assert [entry for entry in swapped.base if entry.startswith("data/")] == ["data/dolly-sample"]
    # an override given before the swap stays, as the recipe's own keys do
    kept = load_recipe("gpt2_dp", ["data.min_documents=100", "data=dolly-sample"])
    assert kept.data.min_documents == 100
    # so a sweep of the baseline over the zero block launches exactly each seed recipe
    for zero, recipe in [("z1", "gpt2_z1"), ("z3_offload", "gpt2_z3_offload"), ("z0", "gpt2_dp")]:
        assert render(load_recipe("gpt2_z2", [f"zero={zero}"])).argv == render(load_recipe(recipe)).argv


@pytest.mark.parametrize("name", PRETRAINING)
def test_one_set_of_numbers(name):
    recipe = load_recipe(name)
    launch = render(recipe)
    argv, cfg = launch.argv, launch.ds_config
    assert option(argv, "--zero-stage") == str(cfg["zero_optimization"]["stage"])
    assert int(option(argv, "--global-batch-size")) == cfg["train_batch_size"]
    assert int(option(argv, "--micro-batch-size")) == cfg["train_micro_batch_size_per_gpu"]
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * recipe.data_parallel_size
    )
    assert cfg["steps_per_print"] == int(option(argv, "--log-interval"))
    assert cfg["log_level"] == "info"
    assert float(option(argv, "--clip-grad")) == cfg["gradient_clipping"]
    assert option(argv, "--deepspeed_config") == launch.ds_config_path == f"{launch.run_dir}/ds_config.json"
    assert option(argv, "-m" if argv[0] == "torchrun" else "--module") == "zerolab.rank.megatron_entry"
    assert f"{ENGINE_DIR}/pretrain_gpt.py" in argv
    assert launch.world_size == launch.nodes * launch.procs_per_node


DEFAULT_SWITCHES = ",".join(switch.name for switch in SWITCHES if switch.equal)


def test_cpu_render_has_the_cpu_workarounds():
    launch = render(load_recipe("cpu/tiny_z2"))
    cpu = {"DS_ACCELERATOR": "cpu", "LOCAL_SIZE": "2", "OMP_NUM_THREADS": "1", "THP_MEM_ALLOC_ENABLE": "1"}
    assert launch.env == cpu | {"ZEROLAB_SPEED": DEFAULT_SWITCHES}
    assert option(launch.argv, "--distributed-backend") == "gloo"
    assert "--no-gradient-accumulation-fusion" in launch.argv
    assert "--no-masked-softmax-fusion" in launch.argv  # its CUDA kernel, chosen in bf16
    assert "--no-pipeline-parallel" in launch.argv
    assert "--bf16" not in launch.argv and "--fp16" not in launch.argv
    assert "bf16" not in launch.ds_config and "fp16" not in launch.ds_config


def test_gpu_render_uses_nccl_and_no_cpu_environment():
    launch = render(load_recipe("gpt2_z2"))
    # the recipe's attention and speed switches, nothing of the CPU's
    assert launch.env == {"ZEROLAB_ATTENTION": "sdpa", "ZEROLAB_SPEED": DEFAULT_SWITCHES}
    assert option(launch.argv, "--distributed-backend") == "nccl"
    assert "--bf16" in launch.argv and launch.ds_config["bf16"] == {"enabled": True}


UNFUSING_FLAGS = {
    "--no-bias-gelu-fusion",  # the erf GeLU: another function than GPT-2's
    "--no-bias-dropout-fusion",
    "--no-persist-layer-norm",
}
BUILD_FREE = ["--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion"]
"""What a GPU recipe with sdpa attention turns off so that no launch builds anything: apex's
gradient-accumulation kernel (its call is commented out at the pinned commit) and Megatron's fused
softmax kernels (only the engine's own attention calls them)."""


@pytest.mark.parametrize("name", [name for name in PRETRAINING if "cpu" not in name.split("/")[:-1]])
def test_gpu_recipes_keep_the_fast_defaults(name):
    recipe = load_recipe(name)
    launch = render(recipe)
    assert not UNFUSING_FLAGS & set(launch.argv)  # the engine's defaults, the speed switches' to change
    assert [flag for flag in launch.argv if flag in BUILD_FREE] == BUILD_FREE
    assert recipe.model.attention == "sdpa" and launch.env["ZEROLAB_ATTENTION"] == "sdpa"
    assert recipe.activation_checkpointing.granularity == "none"
    assert not any(token.startswith(("--recompute", "--checkpoint-activations")) for token in launch.argv)


@pytest.mark.parametrize(
    ("attention", "flags", "env"),
    [
        ("megatron", [], {}),
        ("sdpa", [], {"ZEROLAB_ATTENTION": "sdpa"}),
        ("flash", ["--use-flash-attn-v2"], {}),
    ],
)
def test_attention_renders_its_flag_or_environment(attention, flags, env):
    launch = render(load_recipe("gpt2_z1", [f"model.attention={attention}"]))
    assert [token for token in launch.argv if token.startswith("--use-flash-attn")] == flags
    assert {k: v for k, v in launch.env.items() if k == "ZEROLAB_ATTENTION"} == env
    # on CUDA only the engine's own attention calls (and so builds) Megatron's fused softmax kernels
    assert ("--no-masked-softmax-fusion" in launch.argv) is (attention != "megatron")


def test_cpu_recipes_keep_the_engines_attention():
    recipe = load_recipe("cpu/tiny_z1")
    assert recipe.model.attention == "megatron" and "ZEROLAB_ATTENTION" not in render(recipe).env
    assert "ZEROLAB_ATTENTION" in render(load_recipe("cpu/tiny_z1", ["model.attention=sdpa"])).env


def test_offload_renders_cpu_optimizer_and_offload_block():
    launch = render(load_recipe("gpt2_z3_offload"))
    assert "--cpu-optimizer" in launch.argv
    assert launch.ds_config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert "--cpu-optimizer" not in render(load_recipe("gpt2_z3")).argv


def test_pipeline_parallel_keeps_the_pipeline_engine():
    recipe = load_recipe("gpt2_tp2_pp2")
    launch = render(recipe)
    assert "--no-pipeline-parallel" not in launch.argv
    assert option(launch.argv, "--tensor-model-parallel-size") == "2"
    assert option(launch.argv, "--pipeline-model-parallel-size") == "2"
    assert recipe.data_parallel_size == 1
    assert launch.ds_config["gradient_accumulation_steps"] == 8
    assert recipe.padded_vocab_size == 50432  # a multiple of 128 x 2


def test_padded_vocab_matches_megatron_at_tp1():
    assert load_recipe("gpt2_z1").padded_vocab_size == 50304


def test_gpt2_shapes_are_the_real_ones():
    shapes = {
        name: (r.model.num_layers, r.model.hidden_size, r.model.num_attention_heads, r.model.seq_length)
        for name in ("gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b")
        for r in [load_recipe("gpt2_z1", [f"model={name}"])]
    }
    assert shapes == {
        "gpt2-124m": (12, 768, 12, 1024),
        "gpt2-355m": (24, 1024, 16, 1024),
        "gpt2-774m": (36, 1280, 20, 1024),
        "gpt2-1.5b": (48, 1600, 25, 1024),
    }


def test_fp16_renders_loss_scaling():
    launch = render(load_recipe("gpt2_z1", ["precision=fp16"]))
    assert "--fp16" in launch.argv and "--bf16" not in launch.argv
    assert launch.ds_config["fp16"]["enabled"] is True
    assert launch.ds_config["fp16"]["loss_scale"] == 0


def test_upstream_options_render_their_flags_and_blocks_and_nothing_when_null():
    options = [
        "model.rotary=true",
        "model.rotary_percent=0.25",
        "model.rotary_theta=500000",
        "train.exit_interval=200",
        "logging.timing_log_level=1",
        "precision=bf16",
        "precision.grad_accum_dtype=fp32",
        "logging.flops_profiler_step=2",
        "logging.flops_profiler_top_modules=3",
    ]
    launch = render(load_recipe("gpt2_z1", options))
    words = " ".join(launch.argv)
    for flags in (
        "--rotary-percent 0.25",
        "--rotary-position-embeddings-theta 500000",
        "--exit-interval 200",
        "--timing-log-level 1",
    ):
        assert flags in words
    assert launch.ds_config["data_types"] == {"grad_accum_dtype": "fp32"}
    assert launch.ds_config["flops_profiler"] == {"enabled": True, "profile_step": 2, "top_modules": 3}
    plain = render(load_recipe("gpt2_z1"))
    assert not {"data_types", "flops_profiler"} & set(plain.ds_config)
    assert not {"--rotary-percent", "--exit-interval", "--timing-log-level"} & set(plain.argv)


def test_a_partial_optimizer_offload_renders_its_ratio_and_pytorchs_softmax_its_flag_on_gpu():
    partial = render(load_recipe("gpt2_z3_offload", ["zero.offload_ratio=0.3"]))
    assert partial.ds_config["zero_optimization"]["offload_optimizer"] == {
        "device": "cpu",
        "pin_memory": True,
        "ratio": 0.3,
    }
    whole = render(load_recipe("gpt2_z3_offload")).ds_config["zero_optimization"]["offload_optimizer"]
    assert "ratio" not in whole
    fpdt = [
        "model=gpt2-124m",
        "parallel.sequence=2",
        "parallel.sequence_fpdt=true",
        "parallel.sequence_fpdt_offloading=true",
    ]
    words = " ".join(render(load_recipe("gpt2_z1", [*fpdt, "parallel.sequence_fpdt_chunk_size=32768"])).argv)
    assert "--ds-sequence-parallel-fpdt --ds-sequence-parallel-fpdt-chunk-size 32768" in words
    assert "--ds-sequence-parallel-fpdt-offloading" in words
    fused = ["model.attention=megatron"]
    assert "--no-masked-softmax-fusion" not in render(load_recipe("gpt2_z1", fused)).argv
    unfused = render(load_recipe("gpt2_z1", [*fused, "model.masked_softmax_fusion=false"]))
    assert unfused.argv.count("--no-masked-softmax-fusion") == 1


def test_deepspeed_launcher_single_and_multi_node(tmp_path):
    single = render(load_recipe("cpu/tiny_z1", ["hardware.launcher=deepspeed"]))
    assert single.argv[:8] == [
        "deepspeed",
        "--num_nodes",
        "1",
        "--num_gpus",
        "2",
        "--master_port",
        "29500",
        "--module",
    ]
    assert "LOCAL_SIZE" not in single.env and single.env["DS_ACCELERATOR"] == "cpu"
    multi = render(load_recipe("gpt2_z3", ["hardware=gpu-2nodes-8", "train.micro_batch_size=2"]))
    assert multi.argv[:3] == ["deepspeed", "--hostfile", "hostfile"]
    assert option(multi.argv, "--num_nodes") == "2" and option(multi.argv, "--master_addr") == "node0"
    assert multi.world_size == 16 and multi.ds_config["gradient_accumulation_steps"] == 1


def test_torchrun_multi_node_with_node_rank_and_master():
    launch = render(
        load_recipe("gpt2_z1", ["hardware.nodes=2", "hardware.node_rank=1", "hardware.master_addr=10.0.0.1"])
    )
    assert launch.argv[:11] == [
        "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "1",
        "--master-addr", "10.0.0.1", "--master-port", "29500",
    ]  # fmt: skip
    assert launch.world_size == 4 and launch.ds_config["gradient_accumulation_steps"] == 2


def test_numbers_in_yaml_and_overrides_are_numbers():
    recipe = load_recipe("gpt2_z1", ["train.lr=6e-4", "train.min_lr=1e-5"])
    assert recipe.train.lr == 6e-4 and isinstance(recipe.train.lr, float)
    assert option(render(recipe).argv, "--lr") == "0.0006"


def test_length_in_tokens_rounds_up_to_whole_iterations():
    recipe = load_recipe("cpu/tiny_z1", ["train.iters=null", "train.tokens=100000"])
    assert option(render(recipe).argv, "--train-iters") == str(-(-100000 // (8 * 128)))


SAMPLE_BASED = [
    "train.iters=null",
    "train.samples=200",
    "train.lr_warmup_iters=0",
    "train.lr_warmup_tokens=2048",
    "train.lr_decay_tokens=20480",
    "train.max_tokens=25600",
]


def test_a_sample_based_length_and_token_schedule_render_the_engines_flags_and_no_iterations():
    recipe = load_recipe("cpu/tiny_z1", SAMPLE_BASED)
    argv = render(recipe).argv
    assert "--train-iters" not in argv
    assert [option(argv, flag) for flag in ("--train-samples", "--train-tokens")] == ["200", "25600"]
    assert [option(argv, flag) for flag in ("--lr-warmup-tokens", "--lr-decay-tokens")] == ["2048", "20480"]
    assert train_iters(recipe) == 200 // 8


def test_a_batch_ramp_up_renders_its_three_numbers_and_counts_iterations_as_megatron_does():
    recipe = load_recipe("cpu/tiny_z1", [*SAMPLE_BASED, "train.rampup_batch_size=[4,4,16]"])
    argv = render(recipe).argv
    at = argv.index("--rampup-batch-size")
    assert argv[at + 1 : at + 4] == ["4", "4", "16"]
    # Megatron's update_train_iters: batches of 4 (0 consumed), 4 (4), 4 (8), 4 (12), 8 (16) while
    # at most 16 samples are consumed: 5 iterations, 24 samples; then (200 - 24) // 8 = 22
    assert train_iters(recipe) == 5 + 22


def test_a_blend_of_datasets_is_one_argument_a_word_and_each_missing_prefix_is_named(tmp_path):
    blend = f"0.3 {FIXTURE_PREFIX} 0.7 {tmp_path}/other_text_document"
    recipe = load_recipe("cpu/tiny_z1", [f"data.path={blend}"])
    argv = render(recipe).argv
    at = argv.index("--data-path")
    assert argv[at + 1 : at + 6] == [
        "0.3",
        FIXTURE_PREFIX,
        "0.7",
        f"{tmp_path}/other_text_document",
        "--split",
    ]
    (missing,) = [problem for problem in check_inputs(recipe) if "data.path" in problem]
    assert missing.startswith(f"data.path[2]: {tmp_path}/other_text_document.bin and ")
    assert f"zerolab prep CORPUS --out {tmp_path}/other" in missing


def test_sequence_parallelism_takes_its_ranks_from_data_parallelism():
    # the upstream 1.3B 32k script's arithmetic: 8 ranks, sequence parallel 4, global batch 2 of micro 1
    ulysses = ["model=gpt2-355m", "parallel.sequence=4", "hardware.procs_per_node=8"]
    batch = ["train.global_batch_size=2", "train.micro_batch_size=1"]
    recipe = load_recipe("gpt2_z1", [*ulysses, *batch])
    assert (recipe.data_parallel_size, recipe.gradient_accumulation_steps) == (2, 1)
    launch = render(recipe)
    assert option(launch.argv, "--ds-sequence-parallel-size") == "4"
    assert (launch.ds_config["train_batch_size"], launch.ds_config["gradient_accumulation_steps"]) == (2, 1)
    assert "--ds-sequence-parallel-size" not in render(load_recipe("gpt2_z1")).argv


def test_length_in_epochs_counts_the_prepared_training_split():
    # 31,619 tokens (the .bin is 63,238 bytes of uint16), all in the training split:
    # (31619 - 1) // 128 = 247 samples per epoch; 2 epochs of 8-sample steps = 62 steps
    recipe = load_recipe(
        "cpu/tiny_z1",
        ["train.iters=null", "train.epochs=2", f"data.path={FIXTURE_PREFIX}", "data.split=100,0,0"],
    )
    assert option(render(recipe).argv, "--train-iters") == "62"
    assert run_facts(recipe).epoch_tokens == 31619
    assert check_inputs(recipe) == []


def test_save_interval_in_epochs_is_rendered_in_iterations_of_the_prepared_split():
    # 247 samples per epoch (above) in steps of 8: one epoch is 30.9 iterations, rounded up
    data = [f"data.path={FIXTURE_PREFIX}", "data.split=100,0,0", "train.iters=100"]
    for epochs, iterations in (("1", "31"), ("0.5", "16"), ("2", "62"), ("0.001", "1")):
        argv = render(
            load_recipe(
                "cpu/tiny_z1", [*data, "train.save_interval=null", f"train.save_interval_epochs={epochs}"]
            )
        ).argv
        assert option(argv, "--save-interval") == iterations
        assert "--save" in argv
    argv = render(load_recipe("cpu/tiny_z1", [*data, "train.save_interval=7"])).argv
    assert option(argv, "--save-interval") == "7"


def test_check_inputs_names_missing_data_and_tokenizer():
    recipe = load_recipe("cpu/tiny_z1", ["data.path=data/absent", "data.vocab_file=nowhere/vocab.json"])
    problems = check_inputs(recipe)
    assert len(problems) == 2
    assert "data.path: data/absent.bin and data/absent.idx not found" in problems[0]
    assert "point data.path at a prepared dataset" in problems[0]  # not the recipe's own dolly command
    assert "zerolab prep dolly" not in problems[0]
    assert problems[1].startswith("data.vocab_file: nowhere/vocab.json not found")


def test_shell_text_is_the_argv_when_pasted():
    launch = render(load_recipe("cpu/tiny_z3_offload"), run_dir="/runs/x")
    words = shlex.split(launch.shell().replace("\\\n", " "))
    assert words == [f"{k}={v}" for k, v in launch.env.items()] + launch.argv


def test_ds_config_path_substitution():
    launch = render(load_recipe("cpu/tiny_z1"), run_dir="/runs/x")
    assert option(launch.argv, "--deepspeed_config") == "/runs/x/ds_config.json"


def test_run_facts_keys_follow_the_run_directory_contract():
    unprepared = REPO / "tests" / "no-such-dataset" / "dolly_text_document"  # `make demo` prepares data/
    facts = run_facts(load_recipe("gpt2_z3_offload", [f"data.path={unprepared}"]))
    doc = (REPO / "docs" / "run-directory.md").read_text()
    section = doc.split("## run.json")[1].split("##")[0]
    for key in facts.model_dump():
        assert f"`{key}`" in section
    assert facts.offload_optimizer is True and facts.data_parallel == 2
    assert facts.gradient_accumulation_steps == 4 and facts.precision == "bf16"
    assert facts.epoch_tokens is None  # not known without the dataset


def test_dry_run_and_json_print_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = f"data.path={tmp_path / 'unprepared' / 'dolly_text_document'}"
    assert main(["render", "gpt2_z3_offload", "train.micro_batch_size=4", missing, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "torchrun \\\n" in out and '"offload_optimizer"' in out
    assert "warning: data.path" in err
    assert main(["render", "gpt2_z3_offload", "--json", "train.micro_batch_size=2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"argv", "env", "ds_config", "world_size", "nodes", "procs_per_node"}
    assert printed["ds_config"]["train_micro_batch_size_per_gpu"] == 2
    assert main(["launch", "gpt2_z1", "--dry-run"]) == 0
    assert "--zero-stage 1" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_render_out_writes_config_and_script(tmp_path, capsys):
    out = tmp_path / "render"
    assert main(["render", "cpu/tiny_z2", "--out", str(out)]) == 0
    capsys.readouterr()
    config = json.loads((out / "ds_config.json").read_text())
    assert config["zero_optimization"]["stage"] == 2
    script = (out / "command.sh").read_text()
    assert str((out / "ds_config.json").resolve()) in script
    assert os.access(out / "command.sh", os.X_OK)
    assert main(["render", "cpu/tiny_z2", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_show_prints_a_resolved_recipe_that_loads_back(tmp_path, capsys):
    assert main(["show", "gpt2_z1", "model=gpt2-355m", "train.micro_batch_size=2"]) == 0
    text = capsys.readouterr().out
    assert "padded_vocab_size=50304" in text and "gradient_accumulation_steps=8" in text
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(text)
    again = load_recipe(resolved)
    assert again.model.num_layers == 24 and again.train.micro_batch_size == 2
    assert (
        render(again).as_json()
        == render(load_recipe("gpt2_z1", ["model=gpt2-355m", "train.micro_batch_size=2"])).as_json()
    )


def test_diff_shows_recipe_and_argument_changes(capsys):
    assert main(["diff", "recipes/gpt2_z1.yaml", "recipes/gpt2_z3_offload.yaml"]) == 1  # they differ
    out = capsys.readouterr().out
    assert "zero.stage: 1 -> 3" in out
    assert '--zero-stage: "1" -> "3"' in out
    assert "--cpu-optimizer: (absent) -> true" in out
    assert "zero_optimization.offload_optimizer.device: (absent)" in out
    assert main(["diff", "gpt2_z1", "gpt2_z1"]) == 0
    assert "no differences" in capsys.readouterr().out


def test_diff_takes_each_recipes_overrides(capsys):
    assert main(["diff", "gpt2_z2", "gpt2_z2", "train.micro_batch_size=8"]) == 1
    out = capsys.readouterr().out
    assert "+++ recipes/gpt2_z2.yaml train.micro_batch_size=8" in out
    assert "train.micro_batch_size: 4 -> 8" in out and '--micro-batch-size: "4" -> "8"' in out
    assert main(["diff", "gpt2_z2", "zero=z3", "gpt2_z3"]) == 1  # their files differ, not what they launch
    out = capsys.readouterr().out
    assert "description:" in out and "arguments:" not in out and "ds_config:" not in out
    assert main(["diff", "gpt2_z2", "gpt2_z3", "gpt2_dp"]) == 2
    assert "two recipes, each followed by its overrides" in capsys.readouterr().err


def test_overrides_may_follow_options(capsys):
    assert main(["render", "cpu/tiny_z1", "--json", "train.micro_batch_size=1"]) == 0
    assert json.loads(capsys.readouterr().out)["ds_config"]["gradient_accumulation_steps"] == 4


def test_headers_say_what_was_overridden(capsys):
    assert main(["render", "gpt2_z3", "hardware.procs_per_node=1", "model=gpt2-124m", "--dry-run"]) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    assert header[0] == (
        "# recipes/gpt2_z3.yaml (its description: GPT-2 1.5B, dolly-15k, 2 GPUs, bf16, ZeRO stage 3 "
        "(optimizer states, gradients and weights sharded))"
    )
    assert header[1] == (
        "# overridden: hardware.procs_per_node=1 model=gpt2-124m "
        "(runs as gpt2_z3+hardware.procs_per_node=1+model=gpt2-124m)"
    )
    assert header[2].startswith("# gpt2-124m | world 1 = 1 node(s) x 1 | tensor 1 x pipeline 1 x data 1 |")
    assert "| ZeRO 3 | recompute none | attention sdpa | bf16 | cuda | 100 iterations" in header[2]

    assert main(["render", "gpt2_z3", "--dry-run"]) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    assert header[0].startswith("# recipes/gpt2_z3.yaml: GPT-2 1.5B, dolly-15k, 2 GPUs")
    assert header[1].startswith("# gpt2-1.5b | world 2 = 1 node(s) x 2 |")


def test_run_directory_outputs_are_in_the_render():
    overrides = ["train.save_interval=50", "logging.tensorboard=true", "logging.wandb_project=study"]
    argv = render(load_recipe("gpt2_z2", overrides)).as_json()["argv"]
    assert option(argv, "--save") == "${RUN_DIR}/checkpoints" and option(argv, "--save-interval") == "50"
    assert option(argv, "--tensorboard-dir") == "${RUN_DIR}/tensorboard"
    assert option(argv, "--wandb-project") == "study"
    assert option(argv, "--wandb-save-dir") == "${RUN_DIR}/wandb"
    argv = render(load_recipe("gpt2_z2", overrides), run_dir="/runs/x").argv
    assert option(argv, "--save") == "/runs/x/checkpoints"


def test_zero_keys_go_where_their_stage_reads_them():
    z2 = render(load_recipe("gpt2_z2")).ds_config["zero_optimization"]
    assert z2["allgather_bucket_size"] == 500_000_000 and not any(key.startswith("stage3_") for key in z2)
    knobs = ["zero.prefetch_bucket_size=20000000", "zero.max_live_parameters=300000000"]
    z3 = render(load_recipe("gpt2_z3_offload_param", knobs))
    block = z3.ds_config["zero_optimization"]
    assert "allgather_bucket_size" not in block
    assert (
        block["stage3_prefetch_bucket_size"] == 20_000_000
        and block["stage3_max_live_parameters"] == 300_000_000
    )
    assert block["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert option(z3.argv, "--remote-device") == "cpu" and "--use-pin-memory" in z3.argv


def test_extra_settings_without_the_engine_render_with_a_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", str(tmp_path / "no-engine"))
    extra = ["extra.megatron_args=[--log-params-norm]", "extra.ds_config={wall_clock_breakdown_x: 1}"]
    assert main(["render", "cpu/tiny_z1", *extra, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "not checked by the engine's parser" in captured.err and "make setup" in captured.err
    assert "  --log-params-norm\n" in captured.out and '"wall_clock_breakdown_x": 1' in captured.out


def test_split_datasets_render_megatrons_split_paths_and_no_split(capsys):
    splits = [
        "data.path=null",
        "data.train_path=d/x_train_text_document",
        "data.valid_path=d/x_valid_text_document",
    ]
    assert main(["render", "cpu/tiny_z1", *splits, "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--train-data-path") + 1] == "d/x_train_text_document"
    assert argv[argv.index("--valid-data-path") + 1] == "d/x_valid_text_document"
    assert not {"--data-path", "--split", "--test-data-path"} & set(argv)


def test_a_missing_split_dataset_is_named_with_the_prep_command_that_writes_it(capsys):
    splits = ["data.path=null", "data.train_path=d/x_train_text_document"]
    assert main(["render", "cpu/tiny_z1", *splits, "--json"]) == 0
    assert (
        "data.train_path: d/x_train_text_document.bin and d/x_train_text_document.idx not found; prepare it "
        "with `zerolab prep CORPUS --out d/x --split TRAIN,VALID,TEST`"
    ) in capsys.readouterr().err


def test_epochs_of_a_split_dataset_count_the_whole_training_dataset():
    # data.train_path is the training split itself: 247 samples per epoch (above), whatever data.split says
    splits = ["data.path=null", f"data.train_path={FIXTURE_PREFIX}", "data.split=50,50,0"]
    recipe = load_recipe(
        "cpu/tiny_z1",
        [
            *splits,
            "train.iters=null",
            "train.epochs=2",
            "train.save_interval=null",
            "train.save_interval_epochs=1",
        ],
    )
    argv = render(recipe).argv
    assert (option(argv, "--train-iters"), option(argv, "--save-interval")) == ("62", "31")


def test_epochs_of_a_missing_split_dataset_name_the_prep_command_that_writes_it():
    splits = [
        "data.path=null",
        "data.train_path=d/x_train_text_document",
        "train.save_interval=null",
        "train.save_interval_epochs=1",
    ]
    with pytest.raises(UserError) as error:
        render(load_recipe("cpu/tiny_z1", splits))
    message = str(error.value)
    assert message.startswith("train.save_interval_epochs needs the prepared dataset to count its tokens")
    assert (
        "(data.train_path): prepare it with `zerolab prep CORPUS --out d/x --split TRAIN,VALID,TEST`"
        in message
    )
    assert message.endswith("or give the interval as train.save_interval (iterations)")


def test_the_deepspeed_launcher_over_ssh_takes_the_launch_environment_to_every_node(tmp_path, monkeypatch):
    """DeepSpeed's runner passes only PYTHON*/NCCL*-like variables to the nodes it starts over ssh;
    the rest of the launch's environment goes in the run's deepspeed_env (DS_ENV_FILE), after the
    user's own ~/.deepspeed_env, which DS_ENV_FILE would otherwise hide."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    two_nodes = ["hardware.launcher=deepspeed", "hardware.nodes=2", f"hardware.hostfile={hostfile}"]
    recipe = load_recipe("cpu/tiny_z1", [*two_nodes, "hardware.master_addr=node1"])
    launch = render(recipe, run_dir=str(tmp_path / "run"))
    assert launch.env["DS_ENV_FILE"] == f"{tmp_path}/run/deepspeed_env"
    home = tmp_path / "home"
    home.mkdir()
    (home / ".deepspeed_env").write_text("NCCL_SOCKET_IFNAME=eth0\nOMP_NUM_THREADS=8\n")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "run").mkdir()
    launch.write_config(tmp_path / "run", {"PATH": "/usr/bin"})
    lines = (tmp_path / "run" / "deepspeed_env").read_text().splitlines()
    assert lines[0] == "NCCL_SOCKET_IFNAME=eth0" and "DS_ACCELERATOR=cpu" in lines
    assert "OMP_NUM_THREADS=1" in lines and "OMP_NUM_THREADS=8" not in lines  # the recipe's own wins
    assert not any(line.startswith("DS_ENV_FILE=") for line in lines)
    one_node = render(
        load_recipe("cpu/tiny_z1", ["hardware.launcher=deepspeed"]), run_dir=str(tmp_path / "one")
    )
    assert "DS_ENV_FILE" not in one_node.env


def test_experts_render_their_flags_and_nothing_at_megatrons_defaults():
    experts = ["moe.num_experts=[4]", "moe.expert_parallel=2", "moe.topk=2", "moe.param_group=true"]
    launch = render(load_recipe("cpu/tiny_z1", [*experts, "moe.loss_coeff=0.01", "moe.mlp_type=residual"]))
    assert option(launch.argv, "--num-experts") == "4" and option(launch.argv, "--topk") == "2"
    assert option(launch.argv, "--moe-expert-parallel-size") == "2"
    assert (option(launch.argv, "--moe-loss-coeff"), option(launch.argv, "--mlp-type")) == (
        "0.01",
        "residual",
    )
    assert "--create-moe-param-group" in launch.argv
    assert "--disable-moe-token-dropping" not in launch.argv
    dense = render(load_recipe("cpu/tiny_z1", ["moe.loss_coeff=0.01"])).argv  # upstream's dense scripts
    assert option(dense, "--moe-loss-coeff") == "0.01" and "--num-experts" not in dense
    assert not [
        token for token in render(load_recipe("cpu/tiny_z1")).argv if "moe" in token or "expert" in token
    ]


def test_a_curriculum_renders_its_block():
    curriculum = ["curriculum.enabled=true", "curriculum.min_seq_length=32", "curriculum.steps=4"]
    launch = render(load_recipe("cpu/tiny_z1", curriculum))
    assert launch.ds_config["curriculum_learning"] == {
        "enabled": True,
        "curriculum_type": "seqlen",
        "min_difficulty": 32,
        "max_difficulty": 128,  # model.seq_length
        "schedule_type": "fixed_linear",
        "schedule_config": {"total_curriculum_step": 4, "difficulty_step": 8},
    }
    root = render(
        load_recipe(
            "cpu/tiny_z1", [*curriculum, "curriculum.schedule=fixed_root", "curriculum.root_degree=2"]
        )
    )
    assert root.ds_config["curriculum_learning"]["schedule_config"]["root_degree"] == 2
    assert "curriculum_learning" not in render(load_recipe("cpu/tiny_z1")).ds_config


def test_distillation_renders_the_engines_kd_flags_and_nothing_when_off():
    teacher = ["distillation.teacher=t", "distillation.teacher_num_layers=2"]
    teacher += ["distillation.teacher_hidden_size=64", "distillation.teacher_num_attention_heads=4"]
    launch = render(
        load_recipe("cpu/tiny_z1", ["distillation.kd=true", *teacher, "distillation.temperature=2"])
    )
    assert "--kd" in launch.argv and option(launch.argv, "--load-teacher") == "t"
    assert (option(launch.argv, "--num-layers-teacher"), option(launch.argv, "--hidden-size-teacher")) == (
        "2",
        "64",
    )
    assert option(launch.argv, "--num-attention-heads-teacher") == "4"
    assert option(launch.argv, "--kd-temp") == "2.0" and "--kd-beta-ce" not in launch.argv
    assert not [
        token for token in render(load_recipe("cpu/tiny_z1")).argv if "kd" in token or "teacher" in token
    ]
