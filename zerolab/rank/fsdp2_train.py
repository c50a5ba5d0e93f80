"""The second engine's training loop (`python -m zerolab.rank.fsdp2_train RUN_DIR/request.json`
under torchrun), in the engine's Python: the recipe's GPT-2 as transformers' GPT2LMHeadModel (the
engine's padded vocabulary, tied output layer, tanh GeLU and layer-norm epsilon), sharded by
PyTorch's FSDP2 (`fully_shard` on each layer, then the whole model) or replicated by DDP, trained on
the samples the engine itself would train on, in its order: Megatron-DeepSpeed's own GPT dataset
code (its index cache, its split, its shuffle) and its data-parallel sampler's dealing, with
Megatron's own learning-rate scheduler, its weight-decay groups (none on biases and norms), torch's
AdamW and clipping by the global norm. It prints Megatron's iteration, validation and memory lines
(zerolab.contracts), so that one parser reads both engines, and saves sharded checkpoints
(torch.distributed.checkpoint) that it resumes from. What to do is the request's
(zerolab.contracts.Fsdp2Request)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from zerolab.contracts import (
    CHECKPOINTS_DIR,
    FSDP2_PROGRESS_FILE,
    LATEST_CHECKPOINT,
    Fsdp2Request,
    iteration_line,
    memory_line,
    parse_fsdp2_request,
    step_folder,
)
from zerolab.rank.collector import collector_paused
from zerolab.rank.import_hooks import apply_wanted
from zerolab.rank.prompt_exit import exit_now
from zerolab.rank.workarounds import DEEPSPEED_WORKAROUNDS, WORKAROUNDS

with collector_paused():
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.nn.functional as F
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel
    from transformers import GPT2Config, GPT2LMHeadModel

    from zerolab.rank.hf_gpt2 import hf_state, layout_state


def engine_datasets(request: Fsdp2Request) -> tuple[Any, Any]:
    """The engine's train and validation GPT datasets, built by its own code as pretrain_gpt.py
    builds them (the same sample counts, seed and split, so the same index cache and order)."""
    sys.path.insert(0, request.engine)
    apply_wanted(WORKAROUNDS)  # the engine's imports as a Megatron rank has them (no torchvision...)
    with collector_paused():
        from megatron.core import mpu
        from megatron.data.gpt_dataset import build_train_valid_test_datasets
        from megatron.global_vars import set_args
    set_args(engine_args(request))
    mpu.initialize_model_parallel(1, 1)
    gbs = request.global_batch_size
    eval_iters = (request.train_iters // request.eval_interval + 1) * request.eval_iters
    train, valid, _ = build_train_valid_test_datasets(
        data_prefix=request.data_path,
        data_impl=request.data_impl,
        splits_string=request.split,
        train_valid_test_num_samples=[request.train_iters * gbs, eval_iters * gbs, request.eval_iters * gbs],
        seq_length=request.seq_length,
        seed=request.seed,
        skip_warmup=True,
        train_data_prefix=request.train_data_path,
        valid_data_prefix=request.valid_data_path,
        test_data_prefix=request.test_data_path,
    )
    return train, valid


def engine_args(request: Fsdp2Request) -> argparse.Namespace:
    """The few of Megatron's arguments its dataset and scheduler code read, at its defaults."""
    return argparse.Namespace(
        train_data_exact_num_epochs=None,
        train_desc_path=None,
        train_doc_idx_path=None,
        train_sample_idx_path=None,
        train_shuffle_idx_path=None,
        use_dataset_only=False,
        return_data_index=False,
        lr_decay_tokens=None,
        lr_warmup_tokens=None,
        consumed_train_tokens=0,
    )


def lr_scheduler(request: Fsdp2Request, optimizer: Any) -> Any:
    """Megatron's OptimizerParamScheduler as the engine makes it for an iteration-based run: steps
    counted in samples, warm-up and decay over the whole run, a constant weight decay."""
    with collector_paused():
        from megatron.optimizer_param_scheduler import OptimizerParamScheduler
    gbs = request.global_batch_size
    return OptimizerParamScheduler(
        optimizer,
        max_lr=request.lr,
        min_lr=request.min_lr,
        lr_warmup_steps=request.lr_warmup_iters * gbs,
        lr_decay_steps=request.train_iters * gbs,
        lr_decay_style=request.lr_decay_style,
        start_wd=request.weight_decay,
        end_wd=request.weight_decay,
        wd_incr_steps=request.train_iters * gbs,
        wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=True,
        override_opt_param_scheduler=False,
    )


def build_model(request: Fsdp2Request) -> Any:
    """GPT2LMHeadModel of the request's shape, from the imported checkpoint where one is given (the
    same tensors the engine loads), else transformers' random initialisation from the seed."""
    torch.manual_seed(request.seed)
    config = GPT2Config(**request.model, attn_implementation=request.attention)
    model = GPT2LMHeadModel(config)
    if request.init_from is not None:
        state = hf_state(layout_state(Path(request.init_from)), config.vocab_size)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [name for name in missing if name != "lm_head.weight"]  # tied to wte
        if missing or unexpected:
            raise SystemExit(
                f"zerolab: {request.init_from}: its weights do not fit the recipe's model (missing "
                f"{missing[:4]}, unexpected {unexpected[:4]}): import the model of the recipe's shape"
            )
    if request.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def parallelize(model: Any, request: Fsdp2Request, device: Any) -> Any:
    """The model replicated (DDP) or sharded (FSDP2: each layer a unit, then the root with the
    embeddings, final norm and tied head), as the request's sharding says."""
    if request.sharding == "ddp":
        model.to(device)
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": request.reshard_after_forward}
    if request.precision == "bf16":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if request.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    else:
        model.to(device)
    for block in model.transformer.h:
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model


def parameter_groups(model: Any) -> list[dict[str, Any]]:
    """Megatron's groups (get_param_groups): no weight decay on biases and one-dimensional weights
    (the norms), decay on the rest; wd_mult is what its scheduler multiplies the decay by."""
    decayed, plain = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (plain if name.endswith(".bias") or parameter.ndim == 1 else decayed).append(parameter)
    return [
        {"params": decayed, "wd_mult": 1.0, "lr_mult": 1.0},
        {"params": plain, "wd_mult": 0.0, "lr_mult": 1.0},
    ]


def micro_batches(dataset: Any, request: Fsdp2Request, iteration: int, rank: int, world: int) -> list[Any]:
    """This rank's micro batches of 0-based `iteration`, as the engine's sampler deals a global batch:
    micro batch k of rank r holds samples gbs*iteration + k*mbs*world + r*mbs onwards."""
    mbs, gbs = request.micro_batch_size, request.global_batch_size
    start = iteration * gbs
    batches = []
    for first in range(start + rank * mbs, start + gbs, mbs * world):
        rows = [torch.from_numpy(dataset[index]["text"]) for index in range(first, first + mbs)]
        batches.append(torch.stack(rows))
    return batches


def lm_loss(model: Any, tokens: Any, device: Any) -> Any:
    """The mean next-token loss of a micro batch of seq + 1 tokens a row, in fp32, as the engine's
    (every position counted, causal attention, positions from 0)."""
    tokens = tokens.to(device)
    logits = model(input_ids=tokens[:, :-1]).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def grad_norm(model: Any, clip: float) -> float:
    """The gradients' global norm before clipping to `clip` (0: no clipping)."""
    parameters = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(parameters, clip if clip > 0 else float("inf"))
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


def evaluate(model: Any, dataset: Any, request: Fsdp2Request, iteration: int, rank: int, world: int) -> float:
    """The validation loss the engine prints at `iteration`: eval_iters global batches, the
    validation sampler continuing where the previous evaluation stopped."""
    model.eval()
    losses = []
    offset = (iteration // request.eval_interval - 1) * request.eval_iters
    with torch.no_grad():
        for index in range(offset, offset + request.eval_iters):
            for tokens in micro_batches(dataset, request, index, rank, world):
                losses.append(lm_loss(model, tokens, _device()))
    model.train()
    mean = torch.stack(losses).mean().detach().cpu()
    dist.all_reduce(mean)
    return mean.item() / world


def _device() -> Any:
    """This rank's GPU (LOCAL_RANK), else the CPU."""
    return (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        if torch.cuda.is_available()
        else torch.device("cpu")
    )


def save(
    request: Fsdp2Request, model: Any, optimizer: Any, scheduler: Any, run_dir: Path, iteration: int
) -> None:
    """A sharded checkpoint of weights, optimizer states and the scheduler into
    RUN_DIR/checkpoints/global_stepN (with the model's GPT2Config keys, for its export), then the
    `latest` file that names it (rank 0)."""
    checkpoints = run_dir / CHECKPOINTS_DIR
    model_state, optimizer_state = get_state_dict(model, optimizer)
    folder = checkpoints / step_folder(iteration)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))
    if dist.get_rank() == 0:
        progress = {
            "iteration": iteration,
            "consumed_samples": iteration * request.global_batch_size,
            "scheduler": scheduler.state_dict(),
            "model": request.model,
        }
        (folder / FSDP2_PROGRESS_FILE).write_text(json.dumps(progress))
        (checkpoints / LATEST_CHECKPOINT).write_text(f"{iteration}\n")
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"  successfully saved checkpoint at iteration {iteration:7d} to {checkpoints}", flush=True)


def load(model: Any, optimizer: Any, scheduler: Any, checkpoints: Path, override_scheduler: bool) -> int:
    """Resume from the latest checkpoint in `checkpoints`: weights, optimizer states and the
    scheduler (with `override_scheduler`, the request's schedule at the samples trained, as Megatron's
    --override-opt_param-scheduler); the iteration it was saved at."""
    iteration = int((checkpoints / LATEST_CHECKPOINT).read_text())
    folder = checkpoints / step_folder(iteration)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    progress = json.loads((folder / FSDP2_PROGRESS_FILE).read_text())
    if override_scheduler:
        scheduler.step(increment=progress["consumed_samples"])
    else:
        scheduler.load_state_dict(progress["scheduler"])
    if dist.get_rank() == 0:
        print(f"  successfully loaded checkpoint from {checkpoints} at iteration {iteration}", flush=True)
    return iteration


def memory_report(iteration: int) -> None:
    """Megatron's memory line for this rank, from DeepSpeed's accelerator (the GPU's allocator; on
    CPU the process's resident memory), as a Megatron rank reports it."""
    from deepspeed.accelerator import get_accelerator

    accelerator, mb = get_accelerator(), 1024.0 * 1024.0
    figures = (
        accelerator.memory_allocated() / mb,
        accelerator.max_memory_allocated() / mb,
        accelerator.memory_reserved() / mb,
        accelerator.max_memory_reserved() / mb,
    )
    print(memory_line(dist.get_rank(), iteration, *figures), flush=True)


def train(request: Fsdp2Request, run_dir: Path) -> None:
    """Train as the request says, printing rank 0's iteration lines every log_interval."""
    for workaround in DEEPSPEED_WORKAROUNDS:
        workaround()
    device = _device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    train_data, valid_data = engine_datasets(request)
    model = parallelize(build_model(request), request, device)
    optimizer = torch.optim.AdamW(
        parameter_groups(model),
        lr=request.lr,
        weight_decay=request.weight_decay,
        betas=(request.adam_beta1, request.adam_beta2),
        eps=request.adam_eps,
    )
    scheduler = lr_scheduler(request, optimizer)
    done = (
        load(model, optimizer, scheduler, Path(request.load), request.override_scheduler)
        if request.load
        else 0
    )
    gbs, tokens_per_batch = request.global_batch_size, request.global_batch_size * request.seq_length
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if request.precision == "bf16" and request.sharding == "ddp"
        else contextlib.nullcontext()
    )
    interval_losses, interval_ms, reported = [], 0.0, False
    model.train()
    for iteration in range(done, request.train_iters):
        started = time.perf_counter()
        batches = micro_batches(train_data, request, iteration, rank, world)
        losses = []
        for tokens in batches:
            with autocast:
                loss = lm_loss(model, tokens, device)
            (loss / len(batches)).backward()
            losses.append(loss.detach())
        norm = grad_norm(model, request.clip_grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step(increment=gbs, token_num=(iteration + 1) * tokens_per_batch)
        mean = torch.stack(losses).mean().float().cpu()
        dist.all_reduce(mean)
        interval_losses.append(mean.item() / world)
        interval_ms += (time.perf_counter() - started) * 1000
        number = iteration + 1
        if number % request.log_interval == 0:
            ms = interval_ms / len(interval_losses)
            if rank == 0:
                print(
                    iteration_line(
                        {
                            "iteration": number,
                            "train_iters": request.train_iters,
                            "consumed samples": number * gbs,
                            "consumed tokens": number * tokens_per_batch,
                            "elapsed time per iteration (ms)": ms,
                            "learning rate": optimizer.param_groups[0]["lr"],
                            "global batch size": gbs,
                            "lm loss": sum(interval_losses) / len(interval_losses),
                            "grad norm": norm,
                            "actual seqlen": request.seq_length,
                            "number of skipped iterations": 0,
                            "number of nan iterations": int(not math.isfinite(interval_losses[-1])),
                            "samples per second": gbs * 1000 / ms,
                            "tokens per gpu per second (tgs)": tokens_per_batch * 1000 / ms / world,
                        }
                    ),
                    flush=True,
                )
            if not reported:
                memory_report(number)
                reported = True
            interval_losses, interval_ms = [], 0.0
        if request.eval_iters > 0 and valid_data is not None and number % request.eval_interval == 0:
            value = evaluate(model, valid_data, request, number, rank, world)
            if rank == 0:
                print(
                    f" validation loss at iteration {number} | lm loss value: {value:.6E} | "
                    f"lm loss PPL: {math.exp(min(20.0, value)):.6E} | ",
                    flush=True,
                )
        if request.save_interval and (number % request.save_interval == 0 or number == request.train_iters):
            save(request, model, optimizer, scheduler, run_dir, number)
    dist.barrier()
    if rank == 0:
        print("[after training is done]", flush=True)


def main(request_file: str) -> None:
    """Train as `request_file` asks, in the run directory it is in."""
    try:
        request = parse_fsdp2_request(request_file)
    except ValueError as error:
        sys.exit(f"zerolab: {error}")
    train(request, Path(request_file).resolve().parent)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} REQUEST.json")
    main(sys.argv[1])
    exit_now(0)
