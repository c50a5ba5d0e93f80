"""Fine-tuning recipes (a `finetune` section): composed from the same blocks as pretraining, checked
before launch (each refusal exit 2, naming the key and the fix, nothing written), rendered into the
launch of zerolab's loop with its DeepSpeed config and request.json. No engine needed: training them
is tests/engine/test_finetune_engine.py's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zerolab import rundir
from zerolab.cli import main
from zerolab.contracts import REQUEST_FILE
from zerolab.errors import UserError
from zerolab.estimate.gpu import finetune_fit_problem
from zerolab.estimate.memory import estimate_memory
from zerolab.locations import REPO_ROOT
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.facts import run_facts
from zerolab.recipe.output import REQUEST_END, read_render_text, render_text
from zerolab.recipe.render import render

SETUPS = ("dp", "z1", "z2", "z3", "z3_offload")
ASSETS = REPO_ROOT / "zerolab" / "assets" / "gpt2"


def gpt2_folder(folder: Path, **config: object) -> Path:
    """A Hugging Face GPT-2 folder as far as the checks before launch read it: config.json (GPT2Config's
    keys, `config` over them), the GPT-2 tokenizer files and a weights file (not read before launch)."""
    folder.mkdir(parents=True)
    keys = {"model_type": "gpt2", "n_layer": 3, "n_embd": 96, "n_head": 4, "n_positions": 256}
    (folder / "config.json").write_text(json.dumps(keys | {"vocab_size": 50257} | config))
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(ASSETS / name, folder / name)
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def refused(capsys, *argv: str) -> str:
    """stderr of a command that must exit 2 and print nothing on stdout."""
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)


def test_the_gpt2_xl_recipes_differ_only_in_zero_and_launch_the_loop():
    dumps = {}
    for setup in SETUPS:
        recipe = load_recipe(f"finetune/gpt2_xl_mrpc_{setup}")
        launch = render(recipe)
        assert launch.argv[-3:] == [
            "-m",
            "zerolab.rank.finetune_loop",
            "${RUN_DIR}/request.json".replace("${RUN_DIR}", launch.run_dir),
        ]
        assert launch.ds_config["zero_optimization"]["stage"] == recipe.zero.stage
        assert launch.ds_config["optimizer"]["params"]["lr"] == 2e-5
        assert launch.ds_config["bf16"] == {"enabled": True}
        assert launch.request.task == "mrpc" and launch.request.model == "gpt2-xl"
        assert launch.request.max_seq_length == 128 and launch.request.epochs == 3
        dumped = recipe.model_dump()
        dumped.pop("zero"), dumped.pop("description")
        dumped["base"] = [entry for entry in dumped["base"] if not entry.startswith("zero/")]
        dumps[setup] = dumped
    assert all(dumped == dumps["dp"] for dumped in dumps.values())
    offload = render(load_recipe("finetune/gpt2_xl_mrpc_z3_offload")).ds_config
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert offload["optimizer"]["params"]["torch_adam"] is False  # DeepSpeed's CPU Adam


def test_the_render_text_writes_the_request_the_launch_writes():
    recipe = load_recipe("finetune/cpu/tiny_wnli_z1")
    launch = render(recipe, run_dir="/runs/x")
    text = render_text(recipe, launch)
    request_text = text.split(f"/runs/x/{REQUEST_FILE} <<'{REQUEST_END}' &&\n")[1].split(
        f"\n{REQUEST_END}\n"
    )[0]
    assert json.loads(request_text) == launch.request.as_json()
    config, command = read_render_text(text)
    assert config == launch.ds_config and command == launch.shell()
    assert "zero-z0" not in text and "exports/tiny-demo" in text


def test_a_hf_folder_gives_the_recipe_its_shape_and_name(tmp_path):
    folder = gpt2_folder(tmp_path / "my-gpt2")
    recipe = load_recipe("finetune/cpu/tiny_wnli_z1", [f"finetune.model={folder}"])
    model = recipe.model
    assert (model.name, model.num_layers, model.hidden_size, model.num_attention_heads) == (
        "my-gpt2",
        3,
        96,
        4,
    )
    assert (model.max_position_embeddings, recipe.padded_vocab_size) == (256, 50257)
    facts = run_facts(recipe)
    assert (facts.model, facts.task, facts.model_source, facts.num_layers) == (
        "my-gpt2",
        "wnli",
        str(folder),
        3,
    )
    assert facts.train_iters == 4  # 64 sample rows // 16 a step, one epoch
    # a building block's shape yields to the model's; the recipe's own or an override's must agree
    assert load_recipe("finetune/gpt2_xl_mrpc_z1", [f"finetune.model={folder}"]).model.num_layers == 3
    with pytest.raises(
        UserError, match=r"model.num_layers=5, but the model of finetune.model .* has num_layers 3"
    ):
        load_recipe("finetune/cpu/tiny_wnli_z1", [f"finetune.model={folder}", "model.num_layers=5"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["finetune.task=mrcp"],
            ["`finetune.task` = 'mrcp': Input should be 'cola'", "did you mean `mrpc`?"],
        ),
        (["finetune.tsk=rte"], ["unknown key `finetune.tsk`", "did you mean `finetune.task`?"]),
        (["train.iters=10"], ["fine-tuning trains whole epochs", "train.epochs to a whole number"]),
        (["train.epochs=1.5"], ["fine-tuning trains whole epochs"]),
        (["train.iters=10", "train.epochs=null"], ["fine-tuning trains whole epochs"]),
        (["train.min_lr=1e-5"], ["decay to 0", "set train.min_lr=0"]),
        (["parallel.tensor=2"], ["does not read these keys", "parallel.tensor=2"]),
        (["data.path=data/owt_text_document"], ["does not read these keys", "data.path"]),
        (["activation_checkpointing=selective"], ["activation_checkpointing.granularity"]),
        (["extra.megatron_args=[--use-rotary-position-embeddings]"], ["extra.megatron_args"]),
        (["train.global_batch_size=12"], ["not a multiple of micro batch 4 x data parallel 2"]),
    ],
    ids=lambda value: value[0] if isinstance(value, list) and value and "=" in value[0] else None,
)
def test_a_bad_fine_tuning_recipe_is_refused_naming_the_key(overrides, expected, capsys):
    err = refused(capsys, "render", "finetune/cpu/tiny_wnli_z1", *overrides, "--json")
    for text in expected:
        assert text in err, err


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: tmp / "nowhere", ["finetune.model:", "not found", "save a Hugging Face GPT-2 there"]),
        (lambda tmp: gpt2_folder(tmp / "bert", model_type="bert"), ["model_type 'bert', not 'gpt2'"]),
        (
            lambda tmp: gpt2_folder(
                tmp / "mnli-head",
                architectures=["GPT2ForSequenceClassification"],
                id2label={"0": "a", "1": "b", "2": "c"},
            ),
            ["classification head of 3 labels, and wnli has 2"],
        ),
    ],
    ids=["missing", "not GPT-2", "another head"],
)
def test_a_model_that_cannot_fine_tune_is_refused_before_launch(make, expected, tmp_path, capsys):
    model = make(tmp_path)
    run_dir = tmp_path / "run"
    err = refused(
        capsys, "launch", "finetune/cpu/tiny_wnli_z1", f"finetune.model={model}", "--run-dir", str(run_dir)
    )
    for text in expected:
        assert text in err, err
    assert not run_dir.exists()


def test_a_model_without_its_tokenizer_is_refused(tmp_path, capsys):
    folder = gpt2_folder(tmp_path / "no-tokenizer")
    (folder / "merges.txt").unlink()
    err = refused(
        capsys,
        "launch",
        "finetune/cpu/tiny_wnli_z1",
        f"finetune.model={folder}",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert "no tokenizer" in err and "save_pretrained" in err


def test_missing_split_files_name_the_prep_command_that_writes_them(tmp_path, capsys):
    folder = gpt2_folder(tmp_path / "m")
    overrides = [f"finetune.model={folder}", f"finetune.data={tmp_path / 'glue'}", "finetune.task=mnli"]
    err = refused(capsys, "launch", "finetune/cpu/tiny_wnli_z1", *overrides, "--run-dir", str(tmp_path / "r"))
    assert "mnli_train.jsonl" in err and "mnli_validation_mismatched.jsonl" in err
    assert f"zerolab prep glue mnli --out {tmp_path / 'glue'}" in err


@pytest.mark.parametrize("setup", SETUPS)
def test_a_recipe_renders_before_its_data_is_prepared_and_launch_refuses(
    setup, tmp_path, capsys, monkeypatch
):
    # a fresh clone: no data/glue; render shows the command, the length is counted at launch
    monkeypatch.chdir(tmp_path)
    assert main(["render", f"finetune/gpt2_xl_mrpc_{setup}"]) == 0
    captured = capsys.readouterr()
    assert "iterations unknown until the data is prepared (launch counts them from it)" in captured.out
    assert "zerolab.rank.finetune_loop" in captured.out and "zerolab prep glue mrpc" in captured.err
    err = refused(capsys, "launch", f"finetune/gpt2_xl_mrpc_{setup}", "--run-dir", str(tmp_path / "r"))
    assert "finetune.data: data/glue/mrpc_train.jsonl" in err and not (tmp_path / "r").exists()


def test_a_fine_tuning_run_is_not_resumed(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    recipe = (REPO_ROOT / "recipes" / "finetune" / "cpu" / "tiny_wnli_z1.yaml").read_text()
    (run / "recipe.yaml").write_text(f"{recipe}{rundir.RECIPE_END}\n")
    err = refused(capsys, "launch", "--resume", str(run))
    assert "a fine-tuning run saves no checkpoint and is not resumed" in err


def test_a_slurm_job_writes_the_request_and_refuses_a_run_directory_model(tmp_path, capsys):
    folder = gpt2_folder(tmp_path / "m")
    assert main(["render", "finetune/cpu/tiny_wnli_z1", f"finetune.model={folder}", "--slurm"]) == 0
    script = capsys.readouterr().out
    assert f"<<'{REQUEST_END}'" in script and "zerolab.rank.finetune_loop" in script
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    err = refused(capsys, "render", "finetune/cpu/tiny_wnli_z1", f"finetune.model={run}", "--slurm")
    assert "a SLURM job does not export a run directory's model" in err


def test_the_model_command_is_the_hint_only_for_the_folder_it_writes(tmp_path, capsys):
    model = tmp_path / "exported"
    command = f"zerolab export logs/some-run --out {model}"
    err = refused(
        capsys,
        "launch",
        "finetune/cpu/tiny_wnli_z1",
        f"finetune.model={model}",
        f"finetune.model_command={command}",
    )
    assert f"make it with `{command}`" in err


def test_the_estimate_knows_a_fine_tunings_head_and_its_whole_model_load():
    pretraining = estimate_memory(load_recipe("gpt2_dp"))
    estimates = {setup: estimate_memory(load_recipe(f"finetune/gpt2_xl_mrpc_{setup}")) for setup in SETUPS}
    dp = estimates["dp"].peak_stage
    loss = {part.key: part for part in dp.parts}["loss"]
    assert 0 < loss.bytes < 2**20 and "labels" in loss.how  # 2 logits a token, not 50,304
    assert {part.key: part for part in pretraining.peak_stage.parts}["loss"].bytes > 2**28
    [load] = [part for part in dp.host_parts() if part.key == "load"]
    assert load.bytes == 4 * 1_557_611_200  # GPT-2 XL in fp32, on every rank while it loads
    peaks = [estimates[setup].peak_stage.peak_bytes for setup in SETUPS]
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3] > peaks[4]  # each setup shards (or offloads) more


def test_a_fine_tuning_that_does_not_fit_the_gpu_is_refused_naming_the_keys_that_shrink_it():
    # GPT-2 XL on 24 GB GPUs, the study's: ZeRO 0 does not fit (about 36 GiB), ZeRO 3 does
    problem = finetune_fit_problem(load_recipe("finetune/gpt2_xl_mrpc_dp"), [24.0, 24.0], "NVML")
    assert problem is not None and "cannot launch gpt2_xl_mrpc_dp" in problem
    assert "and the GPU has 24.0 GiB (NVML)" in problem
    assert "zero=z3" in problem and "train.micro_batch_size" in problem and "--gpu-memory 24" in problem
    assert finetune_fit_problem(load_recipe("finetune/gpt2_xl_mrpc_z3"), [24.0, 24.0], "NVML") is None
    assert finetune_fit_problem(load_recipe("gpt2_dp"), [24.0, 24.0], "NVML") is None  # pretraining warns


def test_a_sweep_crosses_models_setups_and_tasks(tmp_path, capsys):
    models = [gpt2_folder(tmp_path / name) for name in ("gpt2-a", "gpt2-b")]
    words = ["finetune/cpu/tiny_wnli_dp", "zero=z0,z3", "finetune.task=wnli,stsb"]  # names, not one name
    words.append("finetune.model=" + ",".join(f"'{model}'" for model in models))
    assert main(["sweep", *words, "--name", "ft", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "8 cells" in out and "(zero x finetune.task x finetune.model)" in out
    assert out.count(" ok\n") == 8 and "would run 8 cell(s); 0 refused" in out


GLUE_SAMPLES = REPO_ROOT / "data_prep" / "samples" / "glue"


@pytest.mark.parametrize(
    ("recipe", "finetuning"),
    [("cpu/tiny_z1", "finetune/cpu/tiny_wnli_z1"), ("gpt2_z3_offload", "finetune/gpt2_xl_mrpc_z3_offload")],
)
def test_a_finetune_override_on_a_pretraining_recipe_is_named_as_what_made_it_fine_tune(
    recipe, finetuning, capsys
):
    err = refused(capsys, "render", recipe, "finetune.task=mrpc", "--json")
    assert "1 problem(s) found before launch" in err, err
    assert "- override `finetune.task=mrpc` made this pretraining recipe a fine-tuning one" in err
    assert "keys: finetune.task='mrpc' (override `finetune.task=mrpc`)" in err
    assert "fix: to pretrain, drop the override `finetune.task=mrpc`" in err
    assert f"`zerolab render {finetuning} finetune.task=mrpc`" in err
    assert "train.iters" in err and "train.min_lr" in err  # the pretraining keys, by name


def test_a_finetune_section_added_to_a_pretraining_file_is_named(tmp_path, capsys):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(
        (REPO_ROOT / "recipes" / "cpu" / "tiny_z1.yaml").read_text() + "finetune:\n  task: wnli\n"
    )
    err = refused(capsys, "render", str(recipe), "--json")
    assert (
        f"- the `finetune` section of {recipe} (finetune.task) made this pretraining recipe a fine-tuning one"
        in err
    )
    assert f"keys: finetune.task='wnli' ({recipe})" in err
    assert f"to pretrain, remove the `finetune` section from {recipe}" in err
    # a fine-tuning recipe's own blocks make it one: a pretraining key there is named as before
    err = refused(capsys, "render", "finetune/cpu/tiny_wnli_z1", "parallel.tensor=2", "--json")
    assert "made this pretraining recipe" not in err and "does not read these keys" in err


@pytest.mark.parametrize(
    "override", ["activation_checkpointing=full", "activation_checkpointing.granularity=full"]
)
def test_full_activation_checkpointing_is_taken_in_either_spelling(override, capsys):
    assert main(["render", "finetune/cpu/tiny_wnli_z1", override, "--json"]) == 0
    capsys.readouterr()
    assert render(load_recipe("finetune/cpu/tiny_wnli_z1", [override])).request.gradient_checkpointing
    # what fine-tuning cannot do stays refused
    err = refused(
        capsys, "render", "finetune/cpu/tiny_wnli_z1", override, "activation_checkpointing.method=block"
    )
    assert "does not read these keys" in err and "activation_checkpointing.method='block'" in err


def test_a_model_under_exports_is_a_folder_checked_before_launch(tmp_path, capsys, monkeypatch):
    # a fresh clone: no exports/ until `make demo` and `zerolab export`; nothing may launch
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("zerolab.backends.local.start", lambda *_, **__: pytest.fail("launched"))
    run_dir = tmp_path / "run"
    data = f"finetune.data={GLUE_SAMPLES}"
    err = refused(capsys, "launch", "finetune/cpu/tiny_wnli_dp", data, "--run-dir", str(run_dir))
    assert (
        "finetune.model: exports/tiny-demo not found; make it with "
        "`make demo && zerolab export logs/sweeps/demo/zero-z0 --out exports/tiny-demo`"
    ) in err
    err = refused(capsys, "launch", "finetune/cpu/tiny_wnli_dp", data, "finetune.model=exports/some-model")
    assert "finetune.model: exports/some-model not found" in err
    assert "`zerolab export RUN_DIR --out exports/some-model`" in err
    (tmp_path / "models").mkdir()  # a folder of the user's own, there: a path inside it is local
    err = refused(capsys, "launch", "finetune/cpu/tiny_wnli_dp", data, "finetune.model=models/mine")
    assert "finetune.model: models/mine not found" in err
    assert not run_dir.exists() and not (tmp_path / "logs").exists()
    # an owner/name that is no local path is a hub name: transformers downloads it at launch
    assert main(["render", "finetune/cpu/tiny_wnli_dp", data, "finetune.model=openai-community/gpt2"]) == 0
    assert "finetune.model" not in capsys.readouterr().err


def test_the_fine_tuning_page_quotes_the_estimates_as_they_are():
    page = " ".join((REPO_ROOT / "docs" / "fine-tuning.md").read_text().split())
    setups = ("dp", "z3", "z3_offload")
    peaks = {setup: estimate_memory(load_recipe(f"finetune/gpt2_xl_mrpc_{setup}")) for setup in setups}
    said = (
        f"a peak of {peaks['dp'].gpu_peak_gib:.2f} GiB allocated per GPU under ZeRO 0, "
        f"{peaks['z3'].gpu_peak_gib:.2f} GiB under ZeRO 3, {peaks['z3_offload'].gpu_peak_gib:.2f} GiB under "
        f"ZeRO 3 + optimizer offload; host {peaks['dp'].host_peak_gib():.1f} GiB per node while loading"
    )
    assert said in page


def test_a_model_and_data_under_the_home_folder_are_read_there(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    overrides = ["finetune.model=~/models/tiny", "finetune.data=~/glue"]
    recipe = load_recipe("finetune/cpu/tiny_wnli_dp", overrides)
    assert recipe.finetune.model == str(tmp_path / "models" / "tiny")
    assert recipe.finetune.data == str(tmp_path / "glue")
