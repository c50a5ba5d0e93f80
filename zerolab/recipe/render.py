"""Render a checked recipe into the launcher command line, its environment and the
DeepSpeed config, all from one set of numbers. Needs neither the engine nor the data
(except for a length given in epochs, which reads the dataset's index)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from zerolab.engine.megatron_entry import FLASH_V2
from zerolab.engine.paths import engine_dir
from zerolab.engine.workarounds import ATTENTION_ENV, SDPA
from zerolab.launch.rundir import CHECKPOINTS_DIR, TENSORBOARD_DIR, WANDB_DIR
from zerolab.recipe.inputs import tokenizer_file
from zerolab.recipe.length import train_iters
from zerolab.recipe.schema import Recipe

DS_CONFIG_PLACEHOLDER = "ds_config.json"
"""The --deepspeed_config path in a render; `zerolab launch` writes the file into the run
directory and substitutes its path (Launch.with_ds_config_path)."""

RUN_DIR_PLACEHOLDER = "RUN_DIR"
"""The run directory in a render made without one: `zerolab launch` creates it
(logs/NAME/TIMESTAMP) and renders again with its path."""


ENTRY_MODULE = "zerolab.engine.megatron_entry"


@dataclass(frozen=True)
class Launch:
    """Everything needed to start a run: argv (the full launcher command line), env, ds_config."""

    argv: list[str]
    env: dict[str, str]
    ds_config: dict[str, Any]
    world_size: int
    nodes: int
    procs_per_node: int
    ds_config_path: str = field(default=DS_CONFIG_PLACEHOLDER, compare=False)

    def as_json(self) -> dict[str, Any]:
        """The `--json` object: argv, env, ds_config, world_size, nodes, procs_per_node."""
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "ds_config": self.ds_config,
            "world_size": self.world_size,
            "nodes": self.nodes,
            "procs_per_node": self.procs_per_node,
        }

    def shell(self) -> str:
        """Copy-pasteable command text: environment assignments, then the quoted argv, one option a line."""
        groups: list[list[str]] = []
        for token in self.argv:
            lone_option = bool(groups) and len(groups[-1]) == 1 and groups[-1][0].startswith("-")
            if token.startswith("-") or not lone_option:
                groups.append([token])
            else:
                groups[-1].append(token)
        lines = [f"{name}={shlex.quote(value)}" for name, value in self.env.items()]
        lines += [shlex.join(group) for group in groups]
        return " \\\n  ".join(lines)

    def with_ds_config_path(self, path: str) -> Launch:
        """The same launch with --deepspeed_config pointing at `path`."""
        argv = list(self.argv)
        argv[argv.index("--deepspeed_config") + 1] = path
        return replace(self, argv=argv, ds_config_path=path)


def render(recipe: Recipe, run_dir: str = RUN_DIR_PLACEHOLDER) -> Launch:
    """The Launch for a loaded (composed, validated, checked) recipe whose outputs (checkpoints,
    TensorBoard, W&B) go under `run_dir`."""
    hw = recipe.hardware
    return Launch(
        argv=[
            *launcher_args(recipe),
            str(engine_dir() / "pretrain_gpt.py"),
            *megatron_args(recipe),
            *run_dir_args(recipe, run_dir),
            *recipe.extra.megatron_args,
        ],
        env=launch_env(recipe),
        ds_config=ds_config(recipe),
        world_size=recipe.world_size,
        nodes=hw.nodes,
        procs_per_node=hw.procs_per_node,
    )


def launcher_args(recipe: Recipe) -> list[str]:
    """torchrun or deepspeed, up to and including the entry module."""
    hw = recipe.hardware
    if hw.launcher == "torchrun":
        argv = ["torchrun", "--nnodes", str(hw.nodes), "--nproc-per-node", str(hw.procs_per_node)]
        if hw.nodes > 1:
            argv += ["--node-rank", str(hw.node_rank), "--master-addr", hw.master_addr]
        return [*argv, "--master-port", str(hw.master_port), "-m", ENTRY_MODULE]
    argv = ["deepspeed"]
    if hw.hostfile is not None:
        argv += ["--hostfile", hw.hostfile]
    argv += ["--num_nodes", str(hw.nodes), "--num_gpus", str(hw.procs_per_node)]
    if hw.nodes > 1:
        argv += ["--master_addr", hw.master_addr]
    return [*argv, "--master_port", str(hw.master_port), "--module", ENTRY_MODULE]


def launch_env(recipe: Recipe) -> dict[str, str]:
    """Environment for every rank: the CPU accelerator and its rank-count workaround, threads,
    W&B's mode and the attention patch."""
    hw = recipe.hardware
    env: dict[str, str] = {}
    if hw.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
        if hw.launcher == "torchrun":
            env["LOCAL_SIZE"] = str(hw.procs_per_node)
    if hw.omp_num_threads is not None:
        env["OMP_NUM_THREADS"] = str(hw.omp_num_threads)
    if recipe.logging.wandb_project is not None:
        env["WANDB_MODE"] = recipe.logging.wandb_mode
    return env | attention_env(recipe)


def megatron_args(recipe: Recipe) -> list[str]:
    """The pretrain_gpt.py arguments."""
    model, train, data, hw = recipe.model, recipe.train, recipe.data, recipe.hardware
    args = [
        "--num-layers", str(model.num_layers),
        "--hidden-size", str(model.hidden_size),
        "--num-attention-heads", str(model.num_attention_heads),
        "--seq-length", str(model.seq_length),
        "--max-position-embeddings", str(model.max_position_embeddings),
        "--make-vocab-size-divisible-by", str(model.make_vocab_size_divisible_by),
        "--attention-dropout", _num(model.attention_dropout),
        "--hidden-dropout", _num(model.hidden_dropout),
        "--init-method-std", _num(model.init_method_std),
        "--tensor-model-parallel-size", str(recipe.parallel.tensor),
        "--pipeline-model-parallel-size", str(recipe.parallel.pipeline),
        "--micro-batch-size", str(train.micro_batch_size),
        "--global-batch-size", str(train.global_batch_size),
        "--train-iters", str(train_iters(recipe)),
        "--lr", _num(train.lr),
        "--min-lr", _num(train.min_lr),
        "--lr-decay-style", train.lr_decay_style,
        "--lr-warmup-iters", str(train.lr_warmup_iters),
        "--weight-decay", _num(train.weight_decay),
        "--adam-beta1", _num(train.adam_beta1),
        "--adam-beta2", _num(train.adam_beta2),
        "--clip-grad", _num(train.clip_grad),
        "--seed", str(train.seed),
        "--log-interval", str(train.log_interval),
        "--eval-interval", str(train.eval_interval),
        "--eval-iters", str(train.eval_iters),
        *data_args(recipe),
        "--num-workers", str(data.num_workers),
        "--distributed-backend", "gloo" if hw.device == "cpu" else "nccl",
    ]  # fmt: skip
    if hw.device == "cpu":  # CUDA kernels the engine would otherwise pick (softmax: in bf16/fp16)
        args += ["--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion"]
    args += attention_args(recipe)
    args += activation_checkpointing_args(recipe)
    if recipe.precision.bf16:
        args.append("--bf16")
    if recipe.precision.fp16:
        args.append("--fp16")
    args += [
        "--deepspeed",
        "--deepspeed_config",
        DS_CONFIG_PLACEHOLDER,
        "--zero-stage",
        str(recipe.zero.stage),
    ]
    if recipe.parallel.pipeline == 1:
        args.append("--no-pipeline-parallel")
    if recipe.zero.offload_optimizer:
        args.append("--cpu-optimizer")
    if recipe.zero.offload_param:
        args += ["--remote-device", "cpu"]
        if recipe.zero.pin_memory:
            args.append("--use-pin-memory")
    return args


def data_args(recipe: Recipe) -> list[str]:
    """The dataset and the tokenizer files (zerolab.recipe.inputs: which files they are)."""
    data = recipe.data
    return [
        "--data-path", data.path,
        "--split", data.split,
        "--tokenizer-type", data.tokenizer_type,
        "--vocab-file", tokenizer_file(recipe, "vocab_file"),
        "--merge-file", tokenizer_file(recipe, "merge_file"),
    ]  # fmt: skip


def attention_args(recipe: Recipe) -> list[str]:
    """model.attention flash: the engine's FlashAttention-2 path. megatron and sdpa add nothing
    (sdpa is zerolab's patch of the engine's CoreAttention, asked for by attention_env)."""
    return [FLASH_V2] if recipe.model.attention == "flash" else []


def attention_env(recipe: Recipe) -> dict[str, str]:
    """model.attention sdpa: ZEROLAB_ATTENTION=sdpa, which applies zerolab's sdpa_attention patch."""
    return {ATTENTION_ENV: SDPA} if recipe.model.attention == "sdpa" else {}


def activation_checkpointing_args(recipe: Recipe) -> list[str]:
    """The recompute flags: Megatron's own (--recompute-*) or DeepSpeed's (--checkpoint-activations
    --deepspeed-activation-checkpointing), from the activation_checkpointing section."""
    ckpt = recipe.activation_checkpointing
    if ckpt.granularity == "none":
        return []
    if ckpt.granularity == "selective":
        return ["--recompute-granularity", "selective"]
    layers = str(ckpt.num_layers or 1)
    if ckpt.implementation == "megatron":
        method = ckpt.method or "uniform"
        return [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            method,
            "--recompute-num-layers",
            layers,
        ]
    args = [
        "--checkpoint-activations",
        "--deepspeed-activation-checkpointing",
        "--checkpoint-num-layers",
        layers,
    ]
    if ckpt.partition_activations:
        args.append("--partition-activations")
    if ckpt.contiguous_memory:
        args.append("--contigious-checkpointing")
    if ckpt.cpu_checkpointing:
        args.append("--checkpoint-in-cpu")
    return args


def run_dir_args(recipe: Recipe, run_dir: str) -> list[str]:
    """What the engine writes into the run directory: checkpoints (train.save_interval),
    TensorBoard events and the W&B run (logging)."""
    args: list[str] = []
    if recipe.train.save_interval is not None:
        args += [
            "--save",
            f"{run_dir}/{CHECKPOINTS_DIR}",
            "--save-interval",
            str(recipe.train.save_interval),
        ]
    logging = recipe.logging
    if logging.tensorboard:
        args += [
            "--tensorboard-dir", f"{run_dir}/{TENSORBOARD_DIR}",
            "--tensorboard-log-interval", str(recipe.train.log_interval),
            "--log-timers-to-tensorboard",
            "--log-validation-ppl-to-tensorboard",
        ]  # fmt: skip
    if logging.wandb_project is not None:
        args += [
            "--wandb-project", logging.wandb_project,
            "--wandb-exp-name", logging.wandb_name or recipe.name,
            "--wandb-save-dir", f"{run_dir}/{WANDB_DIR}",
        ]  # fmt: skip
    return args


def ds_config(recipe: Recipe) -> dict[str, Any]:
    """The DeepSpeed config, from the same numbers as the Megatron arguments."""
    zero, precision, train = recipe.zero, recipe.precision, recipe.train
    zero_block: dict[str, Any] = {"stage": zero.stage}
    if zero.stage >= 1:
        zero_block |= {
            "overlap_comm": zero.overlap_comm,
            "contiguous_gradients": zero.contiguous_gradients,
            "reduce_bucket_size": zero.reduce_bucket_size,
        }
    if zero.stage in (1, 2):
        zero_block["allgather_bucket_size"] = zero.allgather_bucket_size
    for key, name in STAGE3_KEYS.items():
        if getattr(zero, key) is not None:
            zero_block[name] = getattr(zero, key)
    if zero.offload_optimizer:
        zero_block["offload_optimizer"] = {"device": "cpu", "pin_memory": zero.pin_memory}
    if zero.offload_param:
        zero_block["offload_param"] = {"device": "cpu", "pin_memory": zero.pin_memory}
    config: dict[str, Any] = {
        "train_batch_size": train.global_batch_size,
        "train_micro_batch_size_per_gpu": train.micro_batch_size,
        "gradient_accumulation_steps": recipe.gradient_accumulation_steps,
        "gradient_clipping": train.clip_grad,
        "steps_per_print": train.log_interval,
        "log_level": "info",
        "wall_clock_breakdown": False,
        "zero_optimization": zero_block,
    }
    if precision.bf16:
        config["bf16"] = {"enabled": True}
    ckpt = recipe.activation_checkpointing
    if ckpt.granularity == "full" and ckpt.implementation == "deepspeed":
        config["activation_checkpointing"] = {
            "partition_activations": ckpt.partition_activations,
            "contiguous_memory_optimization": ckpt.contiguous_memory,
            "cpu_checkpointing": ckpt.cpu_checkpointing,
        }
    if precision.fp16:
        config["fp16"] = {
            "enabled": True,
            "loss_scale": 0,
            "initial_scale_power": precision.initial_scale_power,
            "loss_scale_window": precision.loss_scale_window,
            "hysteresis": precision.hysteresis,
            "min_loss_scale": precision.min_loss_scale,
        }
    return merge_new_keys(config, recipe.extra.ds_config)


STAGE3_KEYS = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
    "max_reuse_distance": "stage3_max_reuse_distance",
}
"""zero section keys read at stage 3 only, and their ds_config names."""


def merge_new_keys(config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`config` with the keys of `extra` added, mappings merged key by key (the checks have
    refused any key that would replace a rendered value)."""
    merged = dict(config)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_new_keys(merged[key], value)
        else:
            merged[key] = value
    return merged


def _num(value: float) -> str:
    """A float as Megatron's argparse reads it, shortest exact form (0.0001 -> 0.0001, 6e-05)."""
    return repr(float(value))
