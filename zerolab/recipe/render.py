"""Render a checked recipe into its whole launch: the launcher command line (with what the run
writes into its run directory, and what it resumes from), the environment and the DeepSpeed
config, all from one set of numbers. The one place a launch is assembled: `zerolab launch`,
its dry run, `command.sh`, `zerolab render` (also `--out` and `--slurm`) all print or run what
this returns. Needs neither the engine nor the data (except for a length given in epochs,
which reads the dataset's index)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab import rundir
from zerolab.contracts import (
    ATTENTION_ENV,
    DS_CONFIG_FILE,
    FINETUNE_LOOP_MODULE,
    FLASH_V2,
    MEGATRON_ENTRY_MODULE,
    REQUEST_FILE,
    SDPA,
    SPEED_ENV,
    TENSORBOARD_DIR,
    TRAIN_SPLIT,
    WANDB_DIR,
    FinetuneRequest,
    split_file,
)
from zerolab.engine.cuda import toolkit_home
from zerolab.engine.paths import (
    cuda_link_dir,
    engine_bin_dir,
    engine_dir,
    engine_python,
    torch_extensions_dir,
)
from zerolab.finetune.glue import glue_task
from zerolab.finetune.request import write_request
from zerolab.imported import layout_tag
from zerolab.locations import CHECKOUT
from zerolab.recipe.destinations import DeepSpeed, Megatron, destinations, one_to_one
from zerolab.recipe.finetuning import model_source
from zerolab.recipe.inputs import tokenizer_file
from zerolab.recipe.length import save_interval, train_iters
from zerolab.recipe.schema import DEFAULT_MASTER_PORT, Recipe, ZeroSection

HF_ATTENTION = {"megatron": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}
"""model.attention as transformers' attn_implementation, for fine-tuning: eager computes the same
seq x seq scores as the engine's own attention."""

_MARK = "\x00"
"""Wraps the name of a shell variable inside a rendered word: only text zerolab itself puts in
(a job's node rank, the run directory of a render made without one) is ever expanded."""


def shell_variable(name: str) -> str:
    """A placeholder for `${name}`: expanded by the shell that runs the rendered text."""
    return f"{_MARK}{name}{_MARK}"


RUN_DIR_PLACEHOLDER = shell_variable("RUN_DIR")
"""The run directory of a render made without one: `zerolab launch` creates it
(logs/NAME/TIMESTAMP); the printed command expands `${RUN_DIR}`."""


def shell_word(token: str) -> str:
    """`token` quoted for a POSIX shell, its placeholders (shell_variable) as "${NAME}"."""
    pieces = token.split(_MARK)
    if len(pieces) == 1:
        return shlex.quote(token)
    return "".join(
        f'"${{{piece}}}"' if index % 2 else shlex.quote(piece) for index, piece in enumerate(pieces) if piece
    )


def as_text(token: str) -> str:
    """`token` with its placeholders written `${NAME}` (for JSON and messages)."""
    pieces = token.split(_MARK)
    return "".join(f"${{{piece}}}" if index % 2 else piece for index, piece in enumerate(pieces))


@dataclass(frozen=True)
class Placement:
    """Where this node stands among the run's nodes: its rank, node 0's address and, for the
    deepspeed launcher, the hostfile (and whether it starts the other nodes' ranks over ssh)."""

    node_rank: str
    master_addr: str
    hostfile: str | None
    ssh: bool = True

    @classmethod
    def of(cls, recipe: Recipe) -> Placement:
        """As the recipe's hardware section says."""
        hw = recipe.hardware
        return cls(str(hw.node_rank), hw.master_addr, hw.hostfile)

    @classmethod
    def scheduled(cls, run_dir: str) -> Placement:
        """In a SLURM job: each node's rank and node 0's address from the job's shell variables,
        a hostfile of the allocation in the run directory, every node starting its own ranks."""
        hostfile = f"{run_dir}/{rundir.HOSTFILE}"
        return cls(shell_variable("SLURM_NODEID"), shell_variable("MASTER_ADDR"), hostfile, ssh=False)


@dataclass(frozen=True)
class Resume:
    """A launch that continues an earlier run from its last checkpoint."""

    run_dir: Path
    recipe: Recipe
    """The earlier run's resolved recipe (its recipe.yaml)."""


@dataclass(frozen=True)
class Launch:
    """A whole launch: the launcher's argv, the environment it adds, the DeepSpeed config and the
    run directory it writes into. What `zerolab launch` runs, `command.sh` holds, a dry run prints
    and a SLURM job starts on each node."""

    argv: list[str]
    env: dict[str, str]
    ds_config: dict[str, Any]
    run_dir: str
    world_size: int
    nodes: int
    procs_per_node: int
    request: FinetuneRequest | None = None
    """A fine-tuning's request.json (zerolab.contracts.FinetuneRequest), written beside the ds_config."""

    @property
    def ds_config_path(self) -> str:
        """Where the engine reads the DeepSpeed config: in the run directory."""
        return f"{self.run_dir}/{DS_CONFIG_FILE}"

    def as_json(self) -> dict[str, Any]:
        """The `--json` object: argv, env, ds_config, world_size, nodes, procs_per_node (and a
        fine-tuning's request)."""
        return {
            "argv": [as_text(token) for token in self.argv],
            "env": dict(self.env),
            "ds_config": self.ds_config,
            "world_size": self.world_size,
            "nodes": self.nodes,
            "procs_per_node": self.procs_per_node,
        } | ({"request": self.request.as_json()} if self.request else {})

    def shell(self) -> str:
        """The command as shell text: environment assignments, then the quoted argv, one option a line."""
        groups: list[list[str]] = []
        for token in self.argv:
            lone_option = bool(groups) and len(groups[-1]) == 1 and groups[-1][0].startswith("-")
            if token.startswith("-") or not lone_option:
                groups.append([token])
            else:
                groups[-1].append(token)
        lines = [f"{name}={shell_word(value)}" for name, value in self.env.items()]
        lines += [" ".join(shell_word(token) for token in group) for group in groups]
        return " \\\n  ".join(lines)

    def words(self) -> str:
        """`env NAME=VALUE ... ARGV...` as one line of shell words, for a job script."""
        assignments = [f"{name}={value}" for name, value in self.env.items()]
        return " ".join(shell_word(token) for token in ["env", *assignments, *self.argv])

    @staticmethod
    def runtime_env(inherited: Mapping[str, str] | None = None) -> dict[str, str]:
        """What the launcher gets besides the rendered environment: the engine's bin directory first
        on PATH (torchrun, deepspeed, the engine's python), this checkout's zerolab first on
        PYTHONPATH and the start directory off sys.path (every rank imports this zerolab whatever
        that directory holds), unbuffered output, zerolab's own build directory for DeepSpeed's
        JIT-built ops, and where the CUDA toolkit is when it came from pip into the engine
        environment (CUDA_HOME, and LIBRARY_PATH for its libraries' link names). PATH, PYTHONPATH
        and LIBRARY_PATH extend `inherited`'s, or with None the
        shell's own (`$PATH`, for a script)."""

        def first_on(variable: str, directory: str) -> str:
            if inherited is None:
                return f"{directory}${{{variable}:+:${variable}}}"
            rest = inherited.get(variable)
            return directory + (os.pathsep + rest if rest else "")

        env = {"PATH": first_on("PATH", str(engine_bin_dir()))}
        if CHECKOUT is not None:  # an installed zerolab is the engine environment's own
            env["PYTHONPATH"] = first_on("PYTHONPATH", str(CHECKOUT))
        toolkit = toolkit_home(engine_python(), os.environ if inherited is None else inherited)
        if toolkit is not None:
            env["CUDA_HOME"] = str(toolkit)
            env["LIBRARY_PATH"] = first_on("LIBRARY_PATH", str(cuda_link_dir()))
        return env | {
            "PYTHONSAFEPATH": "1",
            "PYTHONUNBUFFERED": "1",
            "TORCH_EXTENSIONS_DIR": str(torch_extensions_dir()),
        }

    def script(self, start_dir: Path, note: str) -> str:
        """command.sh: this launch, re-runnable from anywhere: it changes to `start_dir`, the
        directory the recipe's relative paths are relative to. `note` heads it (what, when)."""
        exports = " ".join(f'{name}="{value}"' for name, value in self.runtime_env().items())
        return (
            "#!/usr/bin/env bash\n"
            f"# {note}\n"
            "# Re-runs the same launch; its --save (if any) writes into this run's checkpoints/.\n"
            "set -euo pipefail\n"
            f"cd {shlex.quote(str(start_dir))}\n"
            f"export {exports}\n"
            f"{self.shell()}\n"
        )

    def write_config(self, directory: Path, inherited: Mapping[str, str]) -> None:
        """The files the launch reads from its run directory `directory`: ds_config.json (a
        fine-tuning's request.json too) and,
        for a launch over ssh (DS_ENV_FILE), deepspeed_env: the lines of the `.deepspeed_env`
        files DeepSpeed would read without it (the user's home, then this directory: NCCL
        settings), then the runtime additions and the rendered environment, as this machine's
        launcher gets them."""
        rundir.write_ds_config(directory, self.ds_config)
        if self.request is not None:
            write_request(directory, self.request)
        if "DS_ENV_FILE" in self.env:
            env = rundir.read_deepspeed_env(Path.home()) | rundir.read_deepspeed_env(Path.cwd())
            env |= self.runtime_env(inherited) | self.env
            env.pop("DS_ENV_FILE")
            rundir.write_deepspeed_env(directory, env)

    def process_env(self, inherited: dict[str, str]) -> dict[str, str]:
        """The launcher's whole environment: `inherited` (less what the recipe decides), the
        runtime additions and the rendered environment."""
        kept = {name: value for name, value in inherited.items() if name not in (ATTENTION_ENV, SPEED_ENV)}
        return kept | self.runtime_env(inherited) | self.env


def render(
    recipe: Recipe,
    *,
    run_dir: str = RUN_DIR_PLACEHOLDER,
    resume: Resume | None = None,
    placement: Placement | None = None,
    engine: str | None = None,
    load_own_checkpoints: bool = False,
) -> Launch:
    """The whole launch of a loaded (composed, validated, checked) recipe writing into `run_dir`,
    continuing `resume`, placed on its nodes by `placement` (default: the recipe's hardware
    section), with the engine checkout at `engine` (default: this machine's). With
    `load_own_checkpoints`, a checkpointing run also loads from its own checkpoints/ (a job that
    may be requeued into the same run directory), unless it starts from imported weights
    (model.init_from: a requeued job starts from them again). A fine-tuning recipe launches
    zerolab's loop with its request instead of the engine's pretrain_gpt.py."""
    hw = recipe.hardware
    init = recipe.model.init_from is not None
    placement = placement or Placement.of(recipe)
    request = None
    if recipe.finetune is not None:
        assert resume is None, "a fine-tuning run is not resumed (zerolab.recipe.selection refuses it)"
        argv = [*launcher_args(recipe, placement, FINETUNE_LOOP_MODULE), f"{run_dir}/{REQUEST_FILE}"]
        request = finetune_request(recipe)
    else:
        argv = [
            *launcher_args(recipe, placement),
            f"{engine or engine_dir()}/pretrain_gpt.py",
            *megatron_args(recipe, f"{run_dir}/{DS_CONFIG_FILE}"),
            *run_dir_args(recipe, run_dir, load_own_checkpoints=load_own_checkpoints and not init),
            *(resume_args(recipe, resume) if resume else init_args(recipe)),
            *recipe.extra.megatron_args,
        ]
    return Launch(
        argv=argv,
        env=launch_env(recipe) | remote_env_file(recipe, placement, run_dir),
        ds_config=ds_config(recipe),
        run_dir=run_dir,
        world_size=recipe.world_size,
        nodes=hw.nodes,
        procs_per_node=hw.procs_per_node,
        request=request,
    )


def launcher_args(recipe: Recipe, placement: Placement, module: str = MEGATRON_ENTRY_MODULE) -> list[str]:
    """torchrun or deepspeed, up to and including the entry `module`; the rendezvous port is
    hardware.master_port, else the default (a one-node `zerolab launch` sets a free one first)."""
    hw = recipe.hardware
    port = str(hw.master_port if hw.master_port is not None else DEFAULT_MASTER_PORT)
    if hw.launcher == "torchrun":
        argv = ["torchrun", "--nnodes", str(hw.nodes), "--nproc-per-node", str(hw.procs_per_node)]
        if hw.nodes > 1:
            argv += ["--node-rank", placement.node_rank, "--master-addr", placement.master_addr]
        return [*argv, "--master-port", port, "-m", module]
    argv = ["deepspeed"]
    if placement.hostfile is not None:
        argv += ["--hostfile", placement.hostfile]
    if not placement.ssh:
        argv += ["--no_ssh", "--node_rank", placement.node_rank]
    argv += ["--num_nodes", str(hw.nodes), "--num_gpus", str(hw.procs_per_node)]
    if hw.nodes > 1:
        argv += ["--master_addr", placement.master_addr]
    return [*argv, "--master_port", port, "--module", module]


def remote_env_file(recipe: Recipe, placement: Placement, run_dir: str) -> dict[str, str]:
    """DS_ENV_FILE, where the deepspeed launcher starts other nodes' ranks over ssh: it exports
    only a few variables there (PYTHON*, NCCL*...), the rest of the launch's environment
    (DS_ACCELERATOR, OMP_NUM_THREADS, the attention patch's) comes from this file, which the
    launch writes (`Launch.write_config`)."""
    hw = recipe.hardware
    if hw.launcher != "deepspeed" or hw.nodes == 1 or not placement.ssh:
        return {}
    return {"DS_ENV_FILE": f"{run_dir}/{rundir.DEEPSPEED_ENV_FILE}"}


def launch_env(recipe: Recipe) -> dict[str, str]:
    """Environment for every rank: the CPU accelerator and its rank-count workaround, threads,
    W&B's mode, the attention patch and the speed switches."""
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
    return env if recipe.finetune is not None else env | attention_env(recipe) | speed_env(recipe)


def megatron_args(recipe: Recipe, ds_config_path: str) -> list[str]:
    """The pretrain_gpt.py arguments: each section's one-to-one fields as the schema declares them
    (zerolab.recipe.destinations), in field order, and what is derived from several fields."""
    hw = recipe.hardware
    tokenizer_files = {
        key: [_declared_flag(recipe, "data", key), tokenizer_file(recipe, key)] for key in TOKENIZER_FILES
    }
    args = [
        *section_args(recipe, "model"),
        *section_args(recipe, "parallel"),
        *section_args(recipe, "train", at={"iters": ["--train-iters", str(train_iters(recipe))]}),
        *section_args(recipe, "data", at=tokenizer_files | split_args(recipe)),
        "--distributed-backend", "gloo" if hw.device == "cpu" else "nccl",
    ]  # fmt: skip
    args += fusion_args(recipe)
    args += attention_args(recipe)
    args += activation_checkpointing_args(recipe)
    args += section_args(recipe, "precision")
    args += ["--deepspeed", "--deepspeed_config", ds_config_path, *section_args(recipe, "zero")]
    if recipe.parallel.pipeline == 1:
        args.append("--no-pipeline-parallel")
    if recipe.zero.offload_optimizer:
        args.append("--cpu-optimizer")
    if recipe.zero.offload_param:
        args += ["--remote-device", "cpu"]
        if recipe.zero.pin_memory:
            args.append("--use-pin-memory")
    return args


def section_args(recipe: Recipe, section: str, at: dict[str, list[str]] | None = None) -> list[str]:
    """The Megatron arguments of one section's one-to-one fields, in field order, with `at[name]`
    placed where field `name` stands (a value derived from it)."""
    values = getattr(recipe, section)
    args: list[str] = []
    for name, info in type(values).model_fields.items():
        for destination in one_to_one(info, Megatron):
            args += _flag(destination.flag, getattr(values, name))
        args += (at or {}).get(name, [])
    return args


def split_args(recipe: Recipe) -> dict[str, list[str]]:
    """Megatron's --split deals the documents of data.path; split datasets need none."""
    if recipe.data.path is None:
        return {}
    return {"split": [_declared_flag(recipe, "data", "split"), recipe.data.split]}


TOKENIZER_FILES = ("vocab_file", "merge_file")
"""The data keys whose flag takes a file zerolab.recipe.inputs decides (null: the bundled one)."""


def _declared_flag(recipe: Recipe, section: str, name: str) -> str:
    """The Megatron flag declared on a section's field."""
    (megatron,) = [
        item
        for item in destinations(type(getattr(recipe, section)).model_fields[name])
        if isinstance(item, Megatron)
    ]
    return megatron.flag


def _flag(flag: str, value: Any) -> list[str]:
    """A flag and its value as argv tokens: a true bool is a bare switch, None and False nothing."""
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    return [flag, _num(value) if isinstance(value, float) else str(value)]


def fusion_args(recipe: Recipe) -> list[str]:
    """The engine's compiled fusions switched off where nothing needs them, so that no launch builds
    anything: gradient-accumulation fusion always (apex's fused_weight_gradient_mlp_cuda is only
    imported: its kernel call is commented out at the pinned commit), the masked-softmax kernels on
    CPU and wherever attention is not the engine's own (sdpa and flash never call them)."""
    args = ["--no-gradient-accumulation-fusion"]
    if recipe.hardware.device == "cpu" or recipe.model.attention != "megatron":
        args.append("--no-masked-softmax-fusion")
    return args


def attention_args(recipe: Recipe) -> list[str]:
    """model.attention flash: the engine's FlashAttention-2 path. megatron and sdpa add nothing
    (sdpa is zerolab's patch of the engine's CoreAttention, asked for by attention_env)."""
    return [FLASH_V2] if recipe.model.attention == "flash" else []


def attention_env(recipe: Recipe) -> dict[str, str]:
    """model.attention sdpa: ZEROLAB_ATTENTION=sdpa, which applies zerolab's sdpa_attention patch."""
    return {ATTENTION_ENV: SDPA} if recipe.model.attention == "sdpa" else {}


def speed_env(recipe: Recipe) -> dict[str, str]:
    """ZEROLAB_SPEED: the speed switches the recipe turns on, in the schema's order (none: unset)."""
    on = [name for name, value in recipe.speed.model_dump().items() if value]
    return {SPEED_ENV: ",".join(on)} if on else {}


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


def run_dir_args(recipe: Recipe, run_dir: str, *, load_own_checkpoints: bool = False) -> list[str]:
    """What the engine writes into the run directory: checkpoints (train.save_interval, or
    save_interval_epochs in iterations; with `load_own_checkpoints` also loaded from there),
    TensorBoard events and the W&B run (logging)."""
    args: list[str] = []
    interval = save_interval(recipe)
    if interval is not None:
        checkpoints = f"{run_dir}/{rundir.CHECKPOINTS_DIR}"
        args += ["--save", checkpoints, "--save-interval", str(interval)]
        if load_own_checkpoints:
            args += ["--load", checkpoints]
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


def resume_args(recipe: Recipe, resume: Resume) -> list[str]:
    """`--load` of the earlier run's checkpoints, and `--override-opt_param-scheduler` when the
    learning-rate schedule differs from the one saved (more iterations, another rate): Megatron
    checks the schedule against the checkpoint's when it resumes."""
    args = ["--load", str(resume.run_dir / rundir.CHECKPOINTS_DIR)]
    if schedule(resume.recipe) != schedule(recipe):
        args.append("--override-opt_param-scheduler")
    return args


def init_args(recipe: Recipe) -> list[str]:
    """model.init_from as the engine's fine-tuning load: the layout's checkpoint (a tag of the
    imported folder), weights only."""
    if recipe.model.init_from is None:
        return []
    tag = layout_tag(recipe.parallel.tensor, recipe.parallel.pipeline)
    return ["--load", recipe.model.init_from, "--load-tag", tag, "--finetune"]


def schedule(recipe: Recipe) -> tuple[Any, ...]:
    """What Megatron's scheduler checks against a checkpoint: iterations, rates, warm-up, decay."""
    train = recipe.train
    return (
        train_iters(recipe),
        train.lr,
        train.min_lr,
        train.lr_warmup_iters,
        train.lr_decay_style,
        train.weight_decay,
    )


def ds_config(recipe: Recipe) -> dict[str, Any]:
    """The DeepSpeed config, from the same numbers as the Megatron arguments: the one-to-one
    fields where the schema declares them (at the ZeRO stages that read them), and the blocks
    derived from several fields."""
    zero, precision = recipe.zero, recipe.precision
    config: dict[str, Any] = {}
    _set_declared(config, recipe, "train")
    config |= {
        "gradient_accumulation_steps": recipe.gradient_accumulation_steps,
        "log_level": "info",
        "wall_clock_breakdown": False,
    }
    _set_declared(config, recipe, "zero")
    offloaded = {"device": "cpu", "pin_memory": zero.pin_memory}
    if zero.offload_optimizer:
        config["zero_optimization"]["offload_optimizer"] = dict(offloaded)
    if zero.offload_param:
        config["zero_optimization"]["offload_param"] = dict(offloaded)
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
    if recipe.finetune is not None:
        config["optimizer"] = finetune_optimizer(recipe)
    return merge_new_keys(config, recipe.extra.ds_config)


def _set_declared(config: dict[str, Any], recipe: Recipe, section: str) -> None:
    """Set the ds_config keys that `section`'s one-to-one fields declare, in field order: a
    stage-bound key only at the ZeRO stages that read it, an unset (None) value not at all."""
    values = getattr(recipe, section)
    for name, info in type(values).model_fields.items():
        value = getattr(values, name)
        for destination in one_to_one(info, DeepSpeed):
            if value is None or (destination.stages and recipe.zero.stage not in destination.stages):
                continue
            *parents, leaf = destination.key.split(".")
            node = config
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value


def stage_bound(stage: int) -> list[str]:
    """The zero section's fields whose ds_config key only ZeRO stage `stage` reads."""
    return [
        name
        for name, info in ZeroSection.model_fields.items()
        if any(destination.stages == (stage,) for destination in one_to_one(info, DeepSpeed))
    ]


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


def finetune_optimizer(recipe: Recipe) -> dict[str, Any]:
    """A fine-tuning's optimizer, in its ds_config: AdamW with the train section's rate, betas and
    weight decay (which the loop leaves off biases and layer norms, as the Trainer does): torch's
    (Hugging Face's Trainer's adamw_torch), or DeepSpeed's CPU Adam when the optimizer is offloaded."""
    train = recipe.train
    return {
        "type": "AdamW",
        "params": {
            "lr": train.lr,
            "betas": [train.adam_beta1, train.adam_beta2],
            "eps": 1e-8,
            "weight_decay": train.weight_decay,
            "torch_adam": not recipe.zero.offload_optimizer,
        },
    }


def finetune_request(recipe: Recipe) -> FinetuneRequest:
    """The request.json of a fine-tuning recipe: the model, the task's split files, the length and
    schedule, and the model settings the recipe's model section gives (attention, dropouts,
    initialisation of the new head, gradient checkpointing)."""
    finetune, model, train, logging = recipe.finetune, recipe.model, recipe.train, recipe.logging
    assert finetune is not None and train.epochs is not None, "checks guarantee both"
    task = glue_task(finetune.task)
    wandb = None
    if logging.wandb_project is not None:
        wandb = {"project": logging.wandb_project, "name": logging.wandb_name or recipe.name}
    return FinetuneRequest(
        model=finetune.model,
        exported=model_source(finetune.model).kind == "run",
        task=task.name,
        train_file=str(split_file(finetune.data, task, TRAIN_SPLIT)),
        eval_files={split: str(split_file(finetune.data, task, split)) for split in task.eval_splits},
        max_seq_length=model.seq_length,
        epochs=int(train.epochs),
        lr_schedule=train.lr_decay_style,
        warmup_steps=train.lr_warmup_iters,
        weight_decay=train.weight_decay,
        seed=train.seed,
        shuffle=finetune.shuffle,
        log_interval=train.log_interval,
        attention=HF_ATTENTION[model.attention],
        gradient_checkpointing=recipe.activation_checkpointing.granularity == "full",
        config={
            "resid_pdrop": model.hidden_dropout,
            "embd_pdrop": model.hidden_dropout,
            "attn_pdrop": model.attention_dropout,
            "initializer_range": model.init_method_std,
        },
        tensorboard=logging.tensorboard,
        wandb=wandb,
    )
