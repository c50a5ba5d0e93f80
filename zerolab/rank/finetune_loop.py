"""The fine-tuning loop every rank runs (`python -m zerolab.rank.finetune_loop RUN_DIR/request.json` under
torchrun or the deepspeed launcher), in the engine's Python: a Hugging Face GPT-2 given a
classification head (GPT2ForSequenceClassification, its pad token GPT-2's end of text, as the seed
study set it), trained on a GLUE task under DeepSpeed's engine with the run directory's ds_config
(any ZeRO stage, offload included), and scored on the task's validation splits with its official
metrics after each epoch. CPU (gloo) and GPU alike. What to do is the request's
(zerolab.contracts.FinetuneRequest); rank 0 prints a line every log_interval steps and writes one JSON
object per step and per score to RUN_DIR/finetune.jsonl (Records)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from zerolab.contracts import (
    DS_CONFIG_FILE,
    EXPORTED_MODEL_DIR,
    FINETUNE_RECORDS_FILE,
    GLUE_TASKS,
    TENSORBOARD_DIR,
    WANDB_DIR,
    FinetuneRequest,
    GlueTask,
)
from zerolab.rank.collector import collector_paused
from zerolab.rank.finetune_inputs import InputError, read_request, read_split
from zerolab.rank.glue_metrics import glue_metrics
from zerolab.rank.prompt_exit import exit_now
from zerolab.rank.workarounds import DEEPSPEED_WORKAROUNDS, lazy_compiler_import

# before DeepSpeed's import, as in a Megatron rank: torch's compiler loads once a run compiles, not
# at DeepSpeed's import (1.2 s of each rank's start)
lazy_compiler_import()

with collector_paused():  # 0.7 of these imports' 5.7 CPU-s on 2 cores
    import deepspeed
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from transformers import (
        AutoConfig,
        AutoTokenizer,
        GPT2ForSequenceClassification,
        Trainer,
        get_constant_schedule_with_warmup,
        get_cosine_schedule_with_warmup,
        get_linear_schedule_with_warmup,
    )


def encode(rows: list[dict[str, Any]], task: GlueTask, tokenizer: Any, max_seq_length: int) -> dict[str, Any]:
    """The rows as run_glue.py encodes them: the task's sentence (or pair) truncated and padded to
    `max_seq_length`, and the labels (floats for STS-B)."""
    texts = [[row[key] for row in rows] for key in task.sentence_keys]
    encoded = tokenizer(*texts, padding="max_length", max_length=max_seq_length, truncation=True)
    dtype = torch.float if task.is_regression else torch.long
    return {
        "input_ids": torch.tensor(encoded["input_ids"]),
        "attention_mask": torch.tensor(encoded["attention_mask"]),
        "labels": torch.tensor([row["label"] for row in rows], dtype=dtype),
    }


def encode_split(path: str, task: GlueTask, tokenizer: Any, max_seq_length: int) -> dict[str, Any]:
    """The split file at `path`, encoded; InputError naming the first example the tokenizer turns into
    no tokens at all (a broken tokenizer, or an empty sentence), which would train on nothing."""
    encoded = encode(read_split(path, task), task, tokenizer, max_seq_length)
    empty = (encoded["attention_mask"].sum(dim=1) == 0).nonzero()
    if len(empty):
        raise InputError(
            f"{path}: example {int(empty[0]) + 1} is no tokens at all once tokenized by the model's "
            f"tokenizer ({len(empty)} such of {len(encoded['labels'])}): check the model folder's tokenizer "
            "files and the example's text"
        )
    return encoded


def parameter_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """The trainable weights in two groups, as Hugging Face's Trainer decays them: `weight_decay`
    for all but biases and layer norms, none for those."""
    decayed = set(Trainer.get_decay_parameter_names(None, model))  # a method that never reads self
    named = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    return [
        {"params": [p for name, p in named if name in decayed], "weight_decay": weight_decay},
        {"params": [p for name, p in named if name not in decayed], "weight_decay": 0.0},
    ]


def evaluate(engine: Any, task: GlueTask, data: dict[str, Any], micro: int) -> dict[str, float]:
    """The mean loss on `data` and, on rank 0, the task's metrics, every rank scoring its share of
    the examples (the same number of batches on each, as ZeRO-3's gathers need)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    count = len(data["labels"])
    share = math.ceil(count / world)
    mine = [min(rank + world * i, count - 1) for i in range(share)]  # past the end: a repeat, dropped
    engine.eval()
    found: dict[int, tuple[Any, float]] = {}
    with torch.no_grad():
        for start in range(0, share, micro):
            indices = mine[start : start + micro]
            batch = {key: value[indices].to(engine.device) for key, value in data.items()}
            output = engine(**batch)
            logits = output.logits.float().cpu()
            losses = _example_losses(task, logits, batch["labels"].cpu())
            predicted = logits.squeeze(-1) if task.is_regression else logits.argmax(-1)
            for position, index in enumerate(indices):
                found[index] = (predicted[position].item(), losses[position].item())
    engine.train()
    gathered: list[dict[int, tuple[Any, float]]] = [{} for _ in range(world)]
    dist.all_gather_object(gathered, found)
    merged = {index: value for part in gathered for index, value in part.items()}
    ordered = [merged[index] for index in range(count)]
    labels = data["labels"].tolist()
    # the metrics on rank 0 alone, which writes and prints them: the others spare scikit-learn's
    # import (1.4 s)
    metrics = glue_metrics(task, [value[0] for value in ordered], labels) if rank == 0 else {}
    return {"loss": sum(value[1] for value in ordered) / count, **metrics}


def _example_losses(task: GlueTask, logits: Any, labels: Any) -> Any:
    if task.is_regression:
        return (logits.squeeze(-1) - labels) ** 2
    return F.cross_entropy(logits, labels, reduction="none")


def not_from_the_weights(loading: dict[str, Any]) -> str | None:
    """The tensors from_pretrained's loading report says were not read from the weights files (the
    new classification head `score` aside), named (the first four and how many), or None."""
    missing = sorted(key for key in loading.get("missing_keys", ()) if not key.startswith("score."))
    missing += sorted(str(entry[0]) for entry in loading.get("mismatched_keys", ()))
    if not missing:
        return None
    more = f", and {len(missing) - 4} more" if len(missing) > 4 else ""
    return f"{len(missing)} tensor(s) ({', '.join(missing[:4])}{more})"


def load_model(request: FinetuneRequest, model_dir: str, task: GlueTask) -> tuple[Any, Any]:
    """The tokenizer and the model, whole on every rank: deepspeed.initialize partitions it under
    ZeRO-3. (Partitioned as it loads, through HfDeepSpeedConfig and zero.Init in from_pretrained, it
    trained from garbage on CPU in 8 of 12 runs, measured before the gather fix of
    zerolab.rank.workarounds: losses NaN or 1e26.)"""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.pad_token = tokenizer.eos_token
    config = AutoConfig.from_pretrained(
        model_dir,
        num_labels=task.num_labels,
        pad_token_id=tokenizer.eos_token_id,
        problem_type="regression" if task.is_regression else "single_label_classification",
        **request.config,
    )
    model, loading = GPT2ForSequenceClassification.from_pretrained(
        model_dir, config=config, attn_implementation=request.attention, output_loading_info=True
    )
    uncovered = not_from_the_weights(loading)
    if uncovered:
        raise RuntimeError(
            f"{model_dir}: its weights do not cover the model its config.json describes: {uncovered} would "
            "keep their random initial values; give the folder the model was saved into whole (config.json "
            "and every weights file)"
        )
    if request.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return tokenizer, model


SCHEDULES = {
    "linear": get_linear_schedule_with_warmup,
    "cosine": get_cosine_schedule_with_warmup,
    "constant": lambda optimizer, warmup, _steps: get_constant_schedule_with_warmup(optimizer, warmup),
}
"""train.lr_decay_style as transformers' schedules (warm-up, then down to 0 at the last step)."""


class Records:
    """RUN_DIR/finetune.jsonl as the loop writes it: by rank 0 only, a line at a time, flushed."""

    def __init__(self, out: Path, rank: int) -> None:
        self.file = open(out / FINETUNE_RECORDS_FILE, "a", encoding="utf-8") if rank == 0 else None  # noqa: SIM115

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` as one line (rank 0)."""
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()


class Loggers:
    """TensorBoard and Weights & Biases, on rank 0, as the request asks."""

    def __init__(self, request: FinetuneRequest, run_dir: Path, rank: int) -> None:
        self.tensorboard = self.wandb = None
        if rank != 0:
            return
        # imported only when asked for: each is a pin of the engine's environment, heavy to import
        if request.tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415

            self.tensorboard = SummaryWriter(str(run_dir / TENSORBOARD_DIR))
        if request.wandb is not None:
            import wandb  # noqa: PLC0415

            self.wandb = wandb.init(
                project=request.wandb["project"], name=request.wandb["name"], dir=str(run_dir / WANDB_DIR)
            )

    def log(self, values: dict[str, float], step: int) -> None:
        """Write `values` (`train/loss`, `eval/validation/accuracy` ...) at `step`."""
        if self.tensorboard is not None:
            for name, value in values.items():
                self.tensorboard.add_scalar(name, value, step)
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def close(self) -> None:
        """Flush and close what is open."""
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()


def main(request_file: str) -> None:
    """Fine-tune and score as `request_file` asks, in the run directory it is in."""
    request = read_request(request_file)
    run_dir = Path(request_file).resolve().parent
    task = GLUE_TASKS.get(request.task)
    if task is None:
        tasks = ", ".join(GLUE_TASKS)
        raise InputError(f"{request_file}: no GLUE task `{request.task}`; GLUE's tasks: {tasks}")
    for workaround in DEEPSPEED_WORKAROUNDS:
        workaround()
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(request.seed)
    ds_config = json.loads((run_dir / DS_CONFIG_FILE).read_text())
    model_dir = str(run_dir / EXPORTED_MODEL_DIR) if request.exported else request.model
    tokenizer, model = load_model(request, model_dir, task)
    max_len = request.max_seq_length
    train = encode_split(request.train_file, task, tokenizer, max_len)
    evals = {split: encode_split(f, task, tokenizer, max_len) for split, f in request.eval_files.items()}
    micro, total = ds_config["train_micro_batch_size_per_gpu"], ds_config["train_batch_size"]
    steps_per_epoch = len(train["labels"]) // total
    steps = steps_per_epoch * request.epochs
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        model_parameters=parameter_groups(model, request.weight_decay),
        config=ds_config,
        lr_scheduler=lambda optimizer: SCHEDULES[request.lr_schedule](optimizer, request.warmup_steps, steps),
    )
    records, loggers = Records(run_dir, rank), Loggers(request, run_dir, rank)
    # seeded again: what the setup drew from the generator (CPU Adam's, under offload) leaves dropout alone
    torch.manual_seed(request.seed)
    generator = torch.Generator().manual_seed(request.seed)
    accumulation = engine.gradient_accumulation_steps()
    engine.train()  # from_pretrained leaves the model in eval mode: dropout off
    step = 0
    for epoch in range(request.epochs):
        order = (
            torch.randperm(len(train["labels"]), generator=generator)
            if request.shuffle
            else torch.arange(len(train["labels"]))
        )
        for batch_index in range(steps_per_epoch):
            started, lr = time.perf_counter(), engine.get_lr()[0]  # the rate this step trains at
            chosen = order[batch_index * total : (batch_index + 1) * total]
            losses = []
            for part in range(accumulation):
                # micro batch `part` of this rank: the global batch dealt out rank by rank
                first = (part * world + rank) * micro
                indices = chosen[first : first + micro]
                batch = {key: value[indices].to(engine.device) for key, value in train.items()}
                loss = engine(**batch).loss
                engine.backward(loss)
                engine.step()
                losses.append(loss.detach().float())
            mean = torch.stack(losses).mean()
            dist.all_reduce(mean)
            step += 1
            elapsed = time.perf_counter() - started
            record = {
                "kind": "train",
                "step": step,
                "steps": steps,
                "epoch": epoch + 1,
                "loss": mean.item() / world,
                "lr": lr,
                "step_ms": elapsed * 1000,
                "samples_per_s": total / elapsed,
                "tokens_per_s": total * max_len / elapsed,
            }
            records.write(record)
            shown = {"train/loss": record["loss"], "train/lr": lr, "train/step_ms": record["step_ms"]}
            loggers.log(shown, step)
            if rank == 0 and (step % request.log_interval == 0 or step == steps):
                print(
                    f"step {step}/{steps} | epoch {epoch + 1} | loss {record['loss']:.4f} | lr {lr:.3e} | "
                    f"{record['step_ms']:.1f} ms/step | {record['samples_per_s']:.1f} samples/s",
                    flush=True,
                )
        for split, data in evals.items():
            scored = evaluate(engine, task, data, micro)
            records.write({"kind": "eval", "split": split, "step": step, "epoch": epoch + 1, **scored})
            loggers.log({f"eval/{split}/{name}": value for name, value in scored.items()}, step)
            if rank == 0:
                shown = " | ".join(f"{name} {value:.4f}" for name, value in scored.items())
                print(f"eval {split} after epoch {epoch + 1}: {shown}", flush=True)
    loggers.close()
    dist.barrier()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} REQUEST.json")
    main(sys.argv[1])
    exit_now(0)
