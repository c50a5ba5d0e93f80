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
    HOST_HUGE_PAGES_ENV,
    SPEED_ENV,
    FinetuneRequest,
    Fsdp2Request,
)
from zerolab.engine.cuda import toolkit_home
from zerolab.engine.paths import cuda_link_dir, engine_bin_dir, engine_caches, engine_python
from zerolab.finetune.request import write_request
from zerolab.locations import CHECKOUT
from zerolab.recipe.destinations import DeepSpeed, one_to_one
from zerolab.recipe.job import job_of
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import DEFAULT_MASTER_PORT, Recipe, ZeroSection

_MARK = "\x00"
"""Wraps the name of a shell variable inside a rendered word: only text zerolab itself puts in
(a backend's node rank, the run directory of a render made without one) is ever expanded."""


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
    deepspeed launcher, the hostfile (and whether it starts the other nodes' ranks over ssh). A
    backend that places the nodes itself gives its own (zerolab.backends); render knows no
    scheduler's variables."""

    node_rank: str
    master_addr: str
    hostfile: str | None
    ssh: bool = True
    master_port: str = str(DEFAULT_MASTER_PORT)
    """The rendezvous port where hardware.master_port is not set."""

    @classmethod
    def of(cls, recipe: Recipe) -> Placement:
        """As the recipe's hardware section says."""
        hw = recipe.hardware
        return cls(str(hw.node_rank), hw.master_addr, hw.hostfile)


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
    request: FinetuneRequest | Fsdp2Request | None = None
    """The request.json a fine-tuning's loop or an FSDP2 run's reads (zerolab.contracts), written beside
    the ds_config."""
    before: tuple[tuple[str, ...], ...] = ()
    """Commands run once, in the engine's environment, before the launcher (a resume's conversion of
    its checkpoint to the universal format)."""

    @property
    def ds_config_path(self) -> str:
        """Where the engine reads the DeepSpeed config: in the run directory."""
        return f"{self.run_dir}/{DS_CONFIG_FILE}"

    def as_json(self) -> dict[str, Any]:
        """The `--json` object: argv, env, ds_config, world_size, nodes, procs_per_node (and a
        fine-tuning's request)."""
        return (
            {
                "argv": [as_text(token) for token in self.argv],
                "env": dict(self.env),
                "ds_config": self.ds_config,
                "world_size": self.world_size,
                "nodes": self.nodes,
                "procs_per_node": self.procs_per_node,
            }
            | ({"request": self.request.as_json()} if self.request else {})
            | ({"before": [list(step) for step in self.before]} if self.before else {})
        )

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

    def steps_before(self) -> str:
        """The commands run before the launcher, one shell line each (each must succeed)."""
        return "".join(" ".join(shell_word(token) for token in step) + " &&\n" for step in self.before)

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
        return env | {"PYTHONSAFEPATH": "1", "PYTHONUNBUFFERED": "1"} | engine_caches()

    @classmethod
    def exports(cls) -> str:
        """The shell line that gives a script's launcher runtime_env (command.sh's, a SLURM job's)."""
        return "export " + " ".join(f'{name}="{value}"' for name, value in cls.runtime_env().items())

    def script(self, start_dir: Path, note: str) -> str:
        """command.sh: this launch, re-runnable from anywhere: it changes to `start_dir`, the
        directory the recipe's relative paths are relative to. `note` heads it (what, when)."""
        return (
            "#!/usr/bin/env bash\n"
            f"# {note}\n"
            "# Re-runs the same launch; its --save (if any) writes into this run's checkpoints/.\n"
            "set -euo pipefail\n"
            f"cd {shlex.quote(str(start_dir))}\n"
            f"{self.exports()}\n"
            f"{self.steps_before()}{self.shell()}\n"
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
    (model.init_from: a requeued job starts from them again). The recipe's job kind
    (zerolab.recipe.job) gives the program and its arguments: the engine's pretrain_gpt.py, or
    zerolab's fine-tuning loop with its request."""
    hw = recipe.hardware
    placement = placement or Placement.of(recipe)
    job = job_of(recipe)
    argv = [
        *launcher_args(recipe, placement, job.entry_module),
        *job.program_args(run_dir, engine=engine, resume=resume, load_own_checkpoints=load_own_checkpoints),
    ]
    return Launch(
        argv=argv,
        env=launch_env(recipe) | remote_env_file(recipe, placement, run_dir),
        ds_config=ds_config(recipe) if job.reads_ds_config else {},
        run_dir=run_dir,
        world_size=recipe.world_size,
        nodes=hw.nodes,
        procs_per_node=hw.procs_per_node,
        request=job.request(engine=engine, resume=resume),
        before=job.steps_before(engine=engine, resume=resume),
    )


def launcher_args(recipe: Recipe, placement: Placement, module: str) -> list[str]:
    """torchrun or deepspeed, up to and including the entry `module`; the rendezvous port is
    hardware.master_port, else the placement's (a one-node `zerolab launch` sets a free one first)."""
    hw = recipe.hardware
    port = str(hw.master_port) if hw.master_port is not None else placement.master_port
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
    torch's huge pages, W&B's mode, the attention patch and the speed switches."""
    hw = recipe.hardware
    env: dict[str, str] = {}
    if hw.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
        if hw.launcher == "torchrun":
            env["LOCAL_SIZE"] = str(hw.procs_per_node)
    if hw.omp_num_threads is not None:
        env["OMP_NUM_THREADS"] = str(hw.omp_num_threads)
    if hw.host_huge_pages:
        env[HOST_HUGE_PAGES_ENV] = "1"
    if recipe.logging.wandb_project is not None:
        env["WANDB_MODE"] = recipe.logging.wandb_mode
    return env | job_of(recipe).env()


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
        "wall_clock_breakdown": recipe.logging.wall_clock_breakdown,
    }
    _set_declared(config, recipe, "zero")
    offloaded = {"device": "cpu", "pin_memory": zero.pin_memory}
    if zero.offload_optimizer:
        config["zero_optimization"]["offload_optimizer"] = dict(offloaded)
        if zero.offload_ratio is not None:
            config["zero_optimization"]["offload_optimizer"]["ratio"] = zero.offload_ratio
    if zero.offload_param:
        config["zero_optimization"]["offload_param"] = dict(offloaded)
    if recipe.train.prescale_gradients:
        config["prescale_gradients"] = True
    _set_declared(config, recipe, "precision")
    if recipe.logging.flops_profiler_step is not None:
        config["flops_profiler"] = {"enabled": True, "profile_step": recipe.logging.flops_profiler_step}
    _set_declared(config, recipe, "logging")
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
    config |= job_of(recipe).ds_config()
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
