"""Fine-tuning recipes launched on DeepSpeed's real engine, on CPU over gloo with 2 ranks: a tiny
GPT-2 made and saved by transformers, given a classification head and fine-tuned on the shipped
WNLI sample by the shipped CPU twins (recipes/finetune/cpu/), ZeRO 0, 1, 2, 3 and 3 with the
optimizer offloaded. ZeRO does not change the arithmetic, so every setup gives the same
losses step by step (fp32: within 1e-4) and the same validation loss and metrics. Skipped, with
the reason, without the engine."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

from finetune_runs import failed_fine_tune, fine_tune

from zerolab.engine.paths import engine_python_env, zerolab_on_path
from zerolab.finetune.glue import glue_task
from zerolab.locations import REPO_ROOT
from zerolab.summarize.collect import summarize_paths
from zerolab.summarize.summary import Options
from zerolab.summarize.tables import models_by_setups

SETUPS = ("dp", "z1", "z2", "z3", "z3_offload")


def test_every_zero_setup_fine_tunes_to_the_same_losses_and_metrics(engine, hf_model, tmp_path):
    # one run also writes TensorBoard events and an offline W&B run, which must not change its numbers
    logged = ["logging.tensorboard=true", "logging.wandb_project=zerolab-test", "logging.wandb_mode=offline"]
    runs = {
        setup: fine_tune(hf_model, setup, tmp_path / setup, *(logged if setup == "z1" else []))
        for setup in SETUPS
    }
    assert list((tmp_path / "z1" / "tensorboard").glob("events.out.tfevents.*"))
    assert list((tmp_path / "z1" / "wandb").glob("wandb/offline-run-*"))
    baseline = runs["dp"]
    train = [record["loss"] for record in baseline if record["kind"] == "train"]
    assert len(train) == 4 and [r["step"] for r in baseline if r["kind"] == "train"] == [1, 2, 3, 4]
    [scored] = [record for record in baseline if record["kind"] == "eval"]
    metrics = glue_task("wnli").metrics  # GLUE scores WNLI by accuracy
    assert scored["split"] == "validation" and set(scored) >= {"loss", *metrics}
    for setup, records in runs.items():
        losses = [record["loss"] for record in records if record["kind"] == "train"]
        assert len(losses) == len(train), setup
        assert all(abs(a - b) <= 1e-4 for a, b in zip(losses, train, strict=True)), (setup, losses, train)
        [other] = [record for record in records if record["kind"] == "eval"]
        assert abs(other["loss"] - scored["loss"]) <= 1e-4, (setup, other, scored)
        assert [other[name] for name in metrics] == [scored[name] for name in metrics], (setup, other, scored)
    # the summary reads them as it reads pretraining runs, with the task's score and a models x setups table
    collection = summarize_paths([tmp_path / setup for setup in SETUPS], Options())
    rows = {summary.row["setup"]: summary.row for summary in collection.runs}
    assert list(rows) == ["z0", "z1", "z2", "z3", "z3_offload"]
    for setup, row in zip(SETUPS, rows.values(), strict=True):
        assert (row["status"], row["task"], row["task_metric"]) == ("completed", "wnli", "accuracy"), row
        assert row["task_score"] == scored["accuracy"] and row["iterations_done"] == row["train_iters"] == 4
        assert row["tokens_per_s_per_gpu"] > 0 and row["ms_per_iter"] > 0 and row["epoch_time_s"] > 0, row
        assert row["first_loss"] == runs[setup][0]["loss"] and row["peak_host_GiB"] > 0, row
    headers, table = models_by_setups(collection)
    assert headers == ["model", "task", *rows] and [line[:2] for line in table] == [[hf_model.name, "wnli"]]
    assert all(cell.startswith(f"accuracy {scored['accuracy']:.3f}, ") for cell in table[0][2:]), table


TRAINER = """
import json, sys
from pathlib import Path
import torch
from torch.utils.data import Dataset, SequentialSampler
from transformers import AutoConfig, AutoTokenizer, GPT2ForSequenceClassification, Trainer, TrainingArguments
from zerolab.finetune.glue import glue_task
from zerolab.locations import REPO_ROOT
from zerolab.rank.finetune_loop import encode
from zerolab.rank.glue_metrics import glue_metrics
from zerolab.rank.finetune_inputs import read_request, read_split

run_dir = Path(sys.argv[1])
request = read_request(run_dir / "request.json")
ds_config = json.loads((run_dir / "ds_config.json").read_text())
adam = ds_config["optimizer"]["params"]
task = glue_task(request.task)
tokenizer = AutoTokenizer.from_pretrained(request.model)
tokenizer.pad_token = tokenizer.eos_token
config = AutoConfig.from_pretrained(
    request.model, num_labels=2, pad_token_id=tokenizer.eos_token_id, **request.config
)
torch.manual_seed(request.seed)
model = GPT2ForSequenceClassification.from_pretrained(
    request.model, config=config, attn_implementation=request.attention
)

class Rows(Dataset):
    def __init__(self, path):
        self.data = encode(read_split(path, task), task, tokenizer, request.max_seq_length)
    def __len__(self):
        return len(self.data["labels"])
    def __getitem__(self, i):
        return {key: value[i] for key, value in self.data.items()}

class InOrder(Trainer):  # the loop's order with shuffling off
    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

arguments = TrainingArguments(
    output_dir=sys.argv[2], use_cpu=True, seed=request.seed, learning_rate=adam["lr"],
    adam_beta1=adam["betas"][0], adam_beta2=adam["betas"][1], adam_epsilon=adam["eps"],
    weight_decay=request.weight_decay, warmup_steps=request.warmup_steps,
    lr_scheduler_type=request.lr_schedule, num_train_epochs=request.epochs,
    per_device_train_batch_size=ds_config["train_micro_batch_size_per_gpu"],
    per_device_eval_batch_size=ds_config["train_micro_batch_size_per_gpu"],
    max_grad_norm=ds_config["gradient_clipping"], optim="adamw_torch",
    report_to=[], save_strategy="no", logging_steps=1, dataloader_num_workers=0,
)
def metrics(prediction):
    return glue_metrics(task, prediction.predictions.argmax(-1).tolist(), prediction.label_ids.tolist())
trainer = InOrder(model=model, args=arguments, train_dataset=Rows(request.train_file),
                  eval_dataset=Rows(request.eval_files["validation"]), compute_metrics=metrics)
trainer.train()
print(json.dumps(trainer.evaluate()))
"""


def test_on_one_process_the_loop_scores_what_hugging_faces_trainer_scores(engine, hf_model, tmp_path):
    # the same seed, data, order (shuffling off), schedule, optimizer and clipping; ZeRO 0. Dropout
    # off: the Trainer's data loader draws its seed from the generator dropout draws from
    overrides = [
        "hardware.procs_per_node=1",
        "train.micro_batch_size=8",
        "train.global_batch_size=8",
        "finetune.shuffle=false",
        "model.hidden_dropout=0",
        "model.attention_dropout=0",
    ]
    run_dir = tmp_path / "loop"
    records = fine_tune(hf_model, "dp", run_dir, *overrides)
    [ours] = [record for record in records if record["kind"] == "eval"]
    done = subprocess.run(
        [str(engine[1]), "-c", TRAINER, str(run_dir), str(tmp_path / "trainer")],
        env=engine_python_env() | zerolab_on_path(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert abs(ours["loss"] - theirs["eval_loss"]) <= 1e-3 * theirs["eval_loss"], (ours, theirs)
    assert ours["accuracy"] == theirs["eval_accuracy"], (ours, theirs)


def test_a_regression_task_fine_tunes_and_is_scored_by_correlation(engine, hf_model, tmp_path):
    # STS-B: one output, a mean-squared-error loss, Pearson and Spearman against the similarity scores
    # (on one rank: ranks split the batches alike whatever the task; the test above runs two)
    records = fine_tune(hf_model, "z3", tmp_path / "stsb", "finetune.task=stsb", "hardware.procs_per_node=1")
    losses = [record["loss"] for record in records if record["kind"] == "train"]
    [scored] = [record for record in records if record["kind"] == "eval"]
    assert len(losses) == 4 and all(math.isfinite(loss) and loss > 0 for loss in losses), losses
    assert -1 <= scored["pearson"] <= 1 and -1 <= scored["spearmanr"] <= 1 and scored["loss"] > 0, scored
    [row] = [summary.row for summary in summarize_paths([tmp_path / "stsb"], Options()).runs]
    assert (row["task"], row["task_metric"], row["task_score"]) == ("stsb", "pearson", scored["pearson"])


BROKEN_TOKENIZER = """
import sys
from transformers import GPT2TokenizerFast
GPT2TokenizerFast(vocab_file=sys.argv[2], merges_file=sys.argv[3]).save_pretrained(sys.argv[1])
"""


def test_a_tokenizer_that_encodes_nothing_fails_the_run_naming_the_file(engine, hf_model, tmp_path):
    # transformers 5 ignores vocab_file and merges_file here and saves an empty tokenizer: every
    # example becomes padding, and the model would train (and score) on nothing, constantly
    model = tmp_path / "broken"
    shutil.copytree(hf_model, model)
    assets = REPO_ROOT / "zerolab" / "assets" / "gpt2"
    command = [
        str(engine[1]),
        "-c",
        BROKEN_TOKENIZER,
        str(model),
        str(assets / "vocab.json"),
        str(assets / "merges.txt"),
    ]
    subprocess.run(command, env=engine_python_env(), check=True, capture_output=True, timeout=300)
    _, log = failed_fine_tune(model, tmp_path / "run")
    assert "wnli_train.jsonl: example 1 is no tokens at all once tokenized by the model's tokenizer" in log


def test_weights_that_do_not_cover_the_config_fail_the_run_naming_the_tensors(engine, hf_model, tmp_path):
    # config.json says 4 layers, the weights hold 2: layers 2 and 3 would fine-tune from random values
    model = tmp_path / "short"
    shutil.copytree(hf_model, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "n_layer": 4}))
    status, _ = failed_fine_tune(model, tmp_path / "run")
    assert (
        f"{model}: its weights do not cover the model its config.json describes: 24 tensor(s)"
        in status["cause"]
    )
    assert "transformer.h.2." in status["cause"]
