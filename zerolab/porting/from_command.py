"""A user's own launch as a recipe: the `pretrain_gpt.py` arguments and DeepSpeed config of a
launch they already run, read by the engine's own parser and config classes (every default
resolved), written as a recipe over the shipped blocks (native keys where the schema has them,
`extra` for the rest), then proven: the recipe is rendered and both launches are resolved again
by the engine and compared value by value. What differs is named with why; the porting traps
(a value the user left to Megatron's or DeepSpeed's default that zerolab's default would change)
are named too.

Needs the engine (Megatron's parser and DeepSpeed's config classes): `make setup`."""

from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zerolab.engine.engine_check import Case, judge, megatron_args_of
from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.destinations import Megatron, destinations
from zerolab.recipe.render import render
from zerolab.recipe.schema import Recipe, section_class
from zerolab.recipe.yaml_io import dump_yaml

BASE = [
    "model/gpt2-124m",
    "data/dolly",
    "precision/fp32",
    "hardware/gpu-1node-2",
    "train/gpt2-seed",
    "activation_checkpointing/none",
    "zero/z0",
]
"""The shipped blocks a ported recipe starts from; every key the launch decides is set over them."""

RUN_DIR_FLAGS = {
    "--save": "zerolab saves into the run directory's checkpoints/ (train.save_interval)",
    "--load": "zerolab resumes with `zerolab launch --resume RUN_DIR` (or model.init_from for weights)",
    "--tensorboard-dir": "zerolab writes TensorBoard events into the run directory (logging.tensorboard)",
    "--wandb-save-dir": "zerolab keeps the W&B run in the run directory",
    "--deepspeed_config": "zerolab writes the DeepSpeed config into the run directory",
    "--deepspeed-config": "zerolab writes the DeepSpeed config into the run directory",
    "--deepspeed": "zerolab always launches through DeepSpeed",
    "--override-opt_param-scheduler": "read only when a checkpoint is loaded; zerolab passes it when "
    "`zerolab launch --resume` continues under another schedule",
    "--universal-checkpoint": "read only when a checkpoint is loaded; `zerolab launch --resume` converts "
    "the checkpoint to the universal format and passes it when it continues under another setup "
    "(docs/resume.md)",
    "--reset-iteration": "read only when a checkpoint is loaded (the engine's load_checkpoint); zerolab "
    "starts from imported weights at iteration 0 (model.init_from), and `zerolab launch --resume` "
    "continues the count",
}
"""Flags whose value is a place of the run (paths aside), or read only when the run loads a
checkpoint: zerolab decides them per run."""

UNREAD_UNDER_DEEPSPEED = {
    "--no-async-tensor-model-parallel-allreduce": "changes nothing under DeepSpeed: the engine's "
    "validate_args (megatron/arguments.py) sets async_tensor_model_parallel_allreduce to False whenever "
    "--deepspeed is given, and zerolab always launches through DeepSpeed; left out",
    "--loss-scale": "read only by Megatron's own mixed-precision optimizer (megatron/optimizer "
    "get_megatron_optimizer's constant grad scaler), which under --deepspeed returns the plain "
    "optimizer before it; DeepSpeed scales fp16 losses by the ds_config's fp16 block (precision "
    "keys), and bf16 unscaled; left out",
    "--no-load-lr-state": "the pinned engine defines it (megatron/arguments.py) and reads it nowhere; "
    "left out",
}
"""Flags the engine never reads in a launch through DeepSpeed, each with the code that says so:
the porter leaves them out (a recipe cannot ask for what would change nothing)."""

IGNORED_ARGS = {
    "save": "a path of the run",
    "load": "a path of the run",
    "tensorboard_dir": "a path of the run",
    "wandb_save_dir": "a path of the run",
    "deepspeed_config": "a path of the run",
    "vocab_file": "a path",
    "merge_file": "a path",
    "data_path": "paths (compared as words: data.path)",
    "train_data_path": "paths",
    "valid_data_path": "paths",
    "test_data_path": "paths",
    "rank": "this process",
    "local_rank": "this process",
    "world_size": "compared as hardware",
}
"""Resolved Megatron arguments that are not the training's: paths and the process's own."""

BATCHES = (
    "your launch gives Megatron and DeepSpeed different batches; the recipe renders Megatron's into both"
)

OPTIMIZER_UNUSED = (
    "Megatron passes its own optimizer to deepspeed.initialize (megatron/training.py "
    "setup_model_and_optimizer: get_megatron_optimizer, from --optimizer and the --lr/--adam-* flags), and "
    "DeepSpeed builds the ds_config optimizer only without one (its engine's _configure_optimizer): the "
    "block changes nothing; left out"
)
"""Why a ds_config optimizer block changes nothing under Megatron."""

TENSORBOARD_OPTIONS = (
    "logging.tensorboard_queue_size",
    "logging.log_batch_size",
    "logging.log_optimizer_states",
)
"""Recipe keys of TensorBoard options, which change nothing without --tensorboard-dir."""
NO_TENSORBOARD = (
    "without --tensorboard-dir the engine makes no TensorBoard writer (megatron/global_vars.py "
    "_set_tensorboard_writer), so this option changes nothing; left out"
)

WHY = {
    "deepspeed_activation_checkpointing": "your launch's --checkpoint-activations without "
    "--deepspeed-activation-checkpointing or a --recompute-method reaches the pinned engine's own "
    "checkpointing with no method, which raises 'Invalid activation recompute method' at the first forward "
    "pass (megatron/model/transformer.py _checkpointed_forward); the recipe checkpoints the same "
    "--checkpoint-num-layers chunks through DeepSpeed's, the engine's other path for it",
    "deepspeed": "zerolab trains through DeepSpeed; your launch ran Megatron alone (the porter's notes say "
    "how its data parallelism and loss scaling were carried)",
    "override_opt_param_scheduler": RUN_DIR_FLAGS["--override-opt_param-scheduler"],
    "universal_checkpoint": RUN_DIR_FLAGS["--universal-checkpoint"],
    "reset_iteration": RUN_DIR_FLAGS["--reset-iteration"],
    "loss_scale": UNREAD_UNDER_DEEPSPEED["--loss-scale"],
    "no_load_lr_state": UNREAD_UNDER_DEEPSPEED["--no-load-lr-state"],
    "gradient_accumulation_fusion": "zerolab turns it off at every launch: apex's fused weight-gradient "
    "kernel is only imported at the pinned commit (its call is commented out), so nothing changes",
    "masked_softmax_fusion": "zerolab turns the fused softmax off on CPU and where attention is not the "
    "engine's own (sdpa, flash never call it): the same function, no kernel build",
    "no_pipeline_parallel": "zerolab runs pipeline 1 without the pipeline engine (--no-pipeline-parallel); "
    "your launch ran DeepSpeed's pipeline engine with one stage",
    "tensorboard_log_interval": "zerolab logs TensorBoard every train.log_interval iterations",
    "log_batch_size_to_tensorboard": NO_TENSORBOARD,
    "tensorboard_queue_size": NO_TENSORBOARD,
    "log_optimizer_states_to_tensorboard": NO_TENSORBOARD,
    "log_timers_to_tensorboard": "logging.tensorboard logs the timers too",
    "log_validation_ppl_to_tensorboard": "logging.tensorboard logs validation perplexity too",
    "clip_grad": "under DeepSpeed, Megatron's --clip-grad clips nothing (DeepSpeed's engine steps the "
    "optimizer); train.clip_grad renders both, set to what your launch clipped by: ds_config "
    "gradient_clipping",
    "steps_per_print": "zerolab prints DeepSpeed's step lines every train.log_interval iterations",
    "log_level": "zerolab renders DeepSpeed's log_level info",
    "zero_stage": "zerolab passes the DeepSpeed config's stage to Megatron too (--zero-stage); your launch "
    "left Megatron at another, and Megatron reads it (ZeRO-3 builds the model partitioned)",
    "ds_pipeline_enabled": "zerolab runs pipeline 1 without the pipeline engine (--no-pipeline-parallel)",
    "save_interval": "your launch gives no --save, so it saved nothing; zerolab renders --save-interval "
    "with its --save only (train.save_interval)",
    "curriculum_params_legacy": "a curriculum_learning block with enabled false trains as none: left out",
    "train_batch_size": BATCHES,
    "train_micro_batch_size_per_gpu": BATCHES,
    "gradient_accumulation_steps": BATCHES,
    "aio_config": "DeepSpeed's async I/O settings (ds_config aio), read only where ZeRO-3 swaps optimizer "
    "states or weights to NVMe (offload device nvme) or a checkpoint writer is set (ds_config "
    "checkpoint.writer); your launch has neither, so nothing reads them: left out",
    "optimizer_name": OPTIMIZER_UNUSED,
    "optimizer_params": OPTIMIZER_UNUSED,
    "tokenizer_type": "your launch names no tokenizer, and the pinned engine's build_tokenizer has no "
    "default: it stops at its start (NotImplementedError); the recipe names GPT2BPETokenizer, the "
    "tokenizer of GPT-2 BPE vocab and merge files",
}
"""Why a rendered value differs from the launch's, where zerolab decides it on purpose."""


@dataclass
class Ported:
    """A launch as a recipe: its YAML text, the recipe, what the render changes (each with why),
    the porting traps named, and whether native keys alone express it (no `extra`)."""

    text: str
    recipe: Recipe
    differences: list[str] = field(default_factory=list)
    traps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def native(self) -> bool:
        return not (self.recipe.extra.megatron_args or self.recipe.extra.ds_config)


def groups(args: list[str]) -> list[tuple[str, list[str]]]:
    """The arguments as (flag, values): `--flag=value` split, values up to the next `--` word."""
    out: list[tuple[str, list[str]]] = []
    for token in args:
        if token.startswith("--"):
            flag, equals, value = token.partition("=")
            out.append((flag, [value] if equals else []))
        elif out:
            out[-1][1].append(token)
        else:
            raise UserError(f"{token!r} comes before any --flag: give the arguments after pretrain_gpt.py")
    return out


SPLITS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "ds_sequence_parallel_size")
"""The arguments whose product divides the world into data-parallel groups (Megatron's validate_args)."""


@dataclass(frozen=True)
class Launch:
    """A launch to port: its arguments after pretrain_gpt.py (or, from a log, its argument dump:
    each argument's printed text, the arguments rebuilt from it by the engine), DeepSpeed config
    and ranks."""

    name: str
    args: list[str]
    ds_config: dict[str, Any]
    nodes: int
    procs_per_node: int
    argument_dump: dict[str, str] = field(default_factory=dict)

    @property
    def world(self) -> int:
        return self.nodes * self.procs_per_node

    def case(self) -> Case:
        if self.argument_dump:
            sizes = [self.argument_dump.get(name, "1") for name in SPLITS]
        else:
            given = dict(groups(self.args))
            sizes = [(given.get("--" + name.replace("_", "-")) or ["1"])[0] for name in SPLITS]
        split = 1
        for size in sizes:
            split *= int(size)
        data_parallel = max(1, self.world // split)
        return Case(
            self.name, self.args, self.ds_config, self.world, data_parallel, argument_dump=self.argument_dump
        )


def port(
    args: list[str],
    ds_config: dict[str, Any],
    *,
    nodes: int,
    procs_per_node: int,
    name: str = "ported",
    argument_dump: dict[str, str] | None = None,
) -> Ported:
    """`args` (after pretrain_gpt.py; or a log's `argument_dump`, each argument as printed) and
    `ds_config` as a recipe, rendered back and compared."""
    (result,) = port_many([Launch(name, args, ds_config, nodes, procs_per_node, argument_dump or {})])
    if isinstance(result, UserError):
        raise result
    return result


def port_many(launches: list[Launch]) -> list[Ported | UserError]:
    """Each launch ported (or the UserError saying why it cannot be), the engine asked twice in all:
    once for the launches, once for the recipes' renders."""
    outcomes = judge([launch.case() for launch in launches])
    made: list[tuple[Launch, Ported, Case] | UserError] = []
    rebuilt: dict[str, list[str]] = {}
    for launch in launches:
        outcome = outcomes[launch.name]
        if launch.argument_dump:
            launch = replace(launch, args=outcome["rebuilt_args"])
            rebuilt[launch.name] = _unrebuilt(outcome, launch.argument_dump)
        try:
            user = _accepted(outcome, "your launch")
            made.append(_made(launch, user))
        except UserError as error:
            made.append(error)
    cases = [item[2] for item in made if not isinstance(item, UserError)]
    rendered = judge(cases) if cases else {}
    results: list[Ported | UserError] = []
    for item in made:
        if isinstance(item, UserError):
            results.append(item)
            continue
        launch, ported, case = item
        try:
            mine = _accepted(rendered[case.name], "the recipe's render")
        except UserError as error:
            results.append(error)
            continue
        user = outcomes[launch.name]
        ported.differences = rebuilt.get(launch.name, []) + _differences(
            user["megatron"]["args"],
            mine["megatron"]["args"],
            user["deepspeed"]["resolved"],
            mine["deepspeed"]["resolved"],
        )
        results.append(ported)
    return results


def _unrebuilt(outcome: dict[str, Any], dump: dict[str, str]) -> list[str]:
    """What the command line rebuilt from a log's argument dump cannot give as the log printed it:
    an argument no command line of the pinned engine sets so, or one the engine does not have (a
    log of another version)."""
    lines = [
        f"Megatron {name}: your log printed {dump[name]!r}; no command line of the pinned engine's "
        "parser gives it that value after its validate_args"
        for name in outcome.get("unreached", [])
    ]
    lines += [
        f"Megatron {name}: your log printed {dump[name]!r}, the recipe's none (the pinned engine has no "
        "such argument: a log of another Megatron version)"
        for name in outcome.get("unknown", [])
    ]
    return lines


def _made(launch: Launch, user: dict[str, Any]) -> tuple[Launch, Ported, Case]:
    """The recipe of one launch the engine accepted, and its render as a case to judge."""
    given = groups(launch.args)
    flags = {flag for flag, _ in given}
    resolved, ds_resolved = user["megatron"]["args"], user["deepspeed"]["resolved"]
    defaults = user["megatron"]["defaults"]
    keys, consumed, traps = _native_keys(resolved, defaults, launch.ds_config, ds_resolved, flags)
    redundant = {
        flag
        for flag, _ in given
        if flag not in consumed
        and _dest(flag) in defaults
        and resolved.get(_dest(flag)) == defaults[_dest(flag)]
    }
    extra_args = [
        token for flag, values in given if flag not in consumed | redundant for token in (flag, *values)
    ]
    extra_ds = _remainder(launch.ds_config, _consumed_ds_keys(launch.ds_config))
    unchanged = sorted(
        key for key in user["deepspeed"]["unchanged"] if _remainder(extra_ds, {key}) != extra_ds
    )
    extra_ds = _remainder(extra_ds, set(unchanged))
    unread_aio = "aio" in extra_ds and not _reads_aio(launch.ds_config)
    if unread_aio:
        del extra_ds["aio"]
    unused_optimizer = extra_ds.pop("optimizer", None) is not None
    off = sorted(
        key for key, value in extra_ds.items() if isinstance(value, dict) and value.get("enabled") is False
    )
    extra_ds = {key: value for key, value in extra_ds.items() if key not in off}
    document: dict[str, Any] = {
        "description": f"ported from a pretrain_gpt.py launch ({launch.name})",
        "base": BASE,
    }
    for dotted, value in keys.items():
        section, key = dotted.split(".", 1)
        document.setdefault(section, {})[key] = value
    hardware = {"nodes": launch.nodes, "procs_per_node": launch.procs_per_node}
    if launch.nodes > 1:
        hardware |= {"launcher": "deepspeed", "hostfile": "hostfile", "master_addr": "node0"}
    document["hardware"] = document.get("hardware", {}) | hardware
    if extra_args or extra_ds:
        document["extra"] = {"megatron_args": extra_args, "ds_config": extra_ds}
    text = dump_yaml(document, width=110)
    with tempfile.TemporaryDirectory(prefix="zerolab-port-") as scratch:
        path = Path(scratch) / f"{launch.name}.yaml"
        path.write_text(text)
        try:
            recipe = load_recipe(path)
        except UserError as error:  # named as the recipe it is, not as the scratch file it was read from
            raise UserError(str(error).replace(str(path), f"the recipe ported from {launch.name}")) from None
    rendered = render(recipe)
    case = Case(
        launch.name,
        megatron_args_of(rendered.argv),
        rendered.ds_config,
        recipe.world_size,
        recipe.data_parallel_size,
    )
    left_out = RUN_DIR_FLAGS | UNREAD_UNDER_DEEPSPEED
    notes = [f"{flag}: {why}" for flag, why in left_out.items() if flag in flags]
    notes += [f"{flag}: passes Megatron's default, left out" for flag in sorted(redundant)]
    notes += [
        f"ds_config {key}: a block with enabled false, as DeepSpeed without it; left out" for key in off
    ]
    notes += [
        f"ds_config {key}: DeepSpeed resolves your config the same without it (its default, or a key it "
        "does not read); left out"
        for key in unchanged
    ]
    notes += [f"ds_config aio: {WHY['aio_config']}"] if unread_aio else []
    tokenizer = resolved.get("tokenizer_type")
    bpe_files = sorted(flags & {"--vocab-file", "--merge-file"})
    if bpe_files and tokenizer not in (None, "GPT2BPETokenizer"):
        notes.append(
            f"{' and '.join(bpe_files)}: GPT-2 BPE files, read by GPT2BPETokenizer alone (megatron/tokenizer/"
            f"tokenizer.py build_tokenizer); your launch's {tokenizer} does not read them: left out"
        )
    zero_block = launch.ds_config.get("zero_optimization", {})
    offloaded = zero_block.get("offload_param", {}).get("device") in ("cpu", "nvme")
    if offloaded and int(zero_block.get("stage", 0)) < 3:
        notes.append(
            f"ds_config zero_optimization.offload_param: DeepSpeed offloads weights at stage 3 alone "
            f"(runtime/zero/stage3.py); at stage {zero_block.get('stage', 0)} nothing reads it; left out"
        )
    notes += [f"ds_config optimizer: {OPTIMIZER_UNUSED}"] if unused_optimizer else []
    return launch, Ported(text, recipe, traps=traps, notes=notes), case


def _reads_aio(ds_config: dict[str, Any]) -> bool:
    """Whether DeepSpeed reads the aio block of `ds_config`: an NVMe offload or a checkpoint writer."""
    zero = ds_config.get("zero_optimization", {})
    blocks = ("offload_optimizer", "offload_param")
    nvme = any(zero.get(block, {}).get("device") == "nvme" for block in blocks)
    return nvme or ds_config.get("checkpoint", {}).get("writer") is not None


def _accepted(outcome: dict[str, Any], what: str) -> dict[str, Any]:
    refused = [outcome[key] for key in ("megatron_error", "deepspeed_error") if key in outcome]
    if refused:
        raise UserError(f"the engine refuses {what}: " + "; ".join(_why_refused(text) for text in refused))
    return outcome


def _why_refused(text: str) -> str:
    """The engine's refusal in a user's words where argparse's is terse: each flag the pinned engine
    does not have, and a flag given no value (a shell expression of the launch that came out empty)."""
    unknown = re.search(r"unrecognized arguments: (.*)$", text)
    if unknown:
        flags = [word for word in unknown.group(1).split() if word.startswith("--")]
        return (
            "flags the pinned engine does not have (from a fork or another Megatron version; each changes "
            "what is trained, or zerolab would drop it with why): " + ", ".join(flags)
        )
    empty = re.search(r"argument (--[\w-]+): expected one argument", text)
    if empty:
        return (
            f"{empty.group(1)} has no value in your launch (a shell variable or expression that came out "
            "empty where the script built the command?): the engine stops at it as it would stop your "
            "launch; give it its value"
        )
    return text


def _schema_flags() -> dict[str, tuple[str, Any]]:
    """Each one-to-one Megatron flag of the schema: (recipe key, field info)."""
    found = {}
    for section, info in Recipe.model_fields.items():
        model = section_class(info.annotation)
        if model is None or section in ("extra", "finetune", "speed"):
            continue
        for name, field_info in model.model_fields.items():
            for destination in destinations(field_info):
                if isinstance(destination, Megatron) and destination.rule is None:
                    found[destination.flag] = (f"{section}.{name}", field_info)
    return found


DESTS = {"--rotary-position-embeddings-theta": "rope_theta"}
"""The schema's flags whose argument Megatron names otherwise (its add_argument's dest)."""


def _dest(flag: str) -> str:
    return DESTS.get(flag, flag.lstrip("-").replace("-", "_"))


def _native_keys(
    resolved: dict[str, Any],
    megatron_defaults: dict[str, Any],
    ds_config: dict[str, Any],
    ds_resolved: dict[str, Any],
    flags: set[str],
) -> tuple[dict[str, Any], set[str], list[str]]:
    """The recipe keys the launch decides (from the resolved arguments: what a flag left out means
    is Megatron's default; a key whose null renders no flag stays null where the launch has
    Megatron's default, and the keys of a section whose null is Megatron's default
    (SET_ONLY_SECTIONS) are set only where the launch's value differs from Megatron's), the flags
    they render, and the porting traps."""
    keys: dict[str, Any] = {}
    consumed = set(RUN_DIR_FLAGS) | set(UNREAD_UNDER_DEEPSPEED)
    traps = []
    defaults = _schema_defaults()
    for flag, (key, _) in _schema_flags().items():
        dest = _dest(flag)
        if dest not in resolved or key in ("data.vocab_file", "data.merge_file"):
            continue
        value = resolved[dest]
        if key.split(".")[0] in SET_ONLY_SECTIONS and value == megatron_defaults.get(dest):
            continue
        if isinstance(value, list) and key == "train.rampup_batch_size":
            value = [int(item) for item in value]
        if value is None and defaults.get(key) is not None:
            continue
        consumed.add(flag)
        if defaults.get(key) is None and value == megatron_defaults.get(dest):
            continue  # null renders no flag: Megatron's default, this value
        keys[key] = value
        if flag not in flags and defaults.get(key) != value:
            traps.append(
                f"{key}: your launch leaves {flag} to Megatron's default {value!r}; zerolab's default is "
                f"{defaults.get(key)!r}: the recipe keeps {value!r}"
            )
    # the length: iterations or samples, as given
    if resolved.get("train_samples"):
        keys["train.iters"] = None
        consumed.add("--train-samples")
    else:
        keys["train.iters"] = resolved["train_iters"]
        consumed.add("--train-iters")
    for key in ("data.path", "data.train_path", "data.valid_path", "data.test_path"):
        dest = {"data.path": "data_path"}.get(key, key.split(".")[1].replace("_path", "_data_path"))
        words = resolved.get(dest)
        keys[key] = " ".join(words) if words else None
        consumed.add("--" + dest.replace("_", "-"))
    bpe = resolved.get("tokenizer_type") in (None, "GPT2BPETokenizer")  # the others read no BPE files
    for key, dest in (("data.vocab_file", "vocab_file"), ("data.merge_file", "merge_file")):
        if resolved.get(dest) and bpe:
            keys[key] = resolved[dest]
        consumed.add("--" + dest.replace("_", "-"))
    keys["data.split"] = resolved["split"]
    consumed.add("--split")
    consumed.add("--encoder-seq-length")  # Megatron's validate_args makes it seq_length: model.seq_length
    keys["parallel.pipeline"] = resolved["pipeline_model_parallel_size"]
    keys["parallel.sequence"] = resolved.get("ds_sequence_parallel_size", 1)
    consumed |= {"--pipeline-model-parallel-size", "--ds-sequence-parallel-size", "--no-pipeline-parallel"}
    keys["hardware.device"] = "cpu" if resolved.get("distributed_backend") == "gloo" else "cuda"
    consumed.add("--distributed-backend")
    for dest, attention in (
        ("use_flash_attn_v2", "flash"),
        ("use_flash_attn_v1", "flash-v1"),
        ("use_flash_attn_triton", "flash-triton"),
    ):
        if resolved.get(dest):
            keys["model.attention"] = attention
    consumed |= {"--use-flash-attn-v2", "--use-flash-attn-v1", "--use-flash-attn-triton", "--use-flash-attn"}
    if resolved.get("moe_token_dropping") is False:
        keys["moe.token_dropping"] = False
        consumed.add("--disable-moe-token-dropping")
    consumed |= {"--no-masked-softmax-fusion", "--no-gradient-accumulation-fusion"}
    if keys["hardware.device"] == "cuda" and keys.get("model.attention", "megatron") == "megatron":
        keys["model.masked_softmax_fusion"] = resolved.get("masked_softmax_fusion", True)
    # elsewhere zerolab renders --no-masked-softmax-fusion whatever the key says: left at its default
    keys |= _checkpointing(resolved, consumed)
    if not resolved.get("tensorboard_dir"):  # the options of a writer the engine never makes
        keys = {key: value for key, value in keys.items() if key not in TENSORBOARD_OPTIONS}
    else:
        keys["logging.tensorboard"] = True
        consumed |= {
            "--log-timers-to-tensorboard",
            "--log-validation-ppl-to-tensorboard",
            "--tensorboard-log-interval",
        }
    for dest, key in (("wandb_project", "logging.wandb_project"), ("wandb_exp_name", "logging.wandb_name")):
        if resolved.get(dest):
            keys[key] = resolved[dest]
        consumed.add("--" + dest.replace("_", "-"))
    if resolved.get("save") and resolved.get("save_interval"):
        keys["train.save_interval"] = resolved["save_interval"]
    else:
        keys["train.save_interval"] = None
    consumed.add("--save-interval")
    consumed |= {"--fp16", "--bf16", "--zero-stage", "--cpu-optimizer", "--remote-device", "--use-pin-memory"}
    keys |= _from_ds_config(ds_config, ds_resolved, resolved, traps)
    return keys, consumed, traps


SET_ONLY_SECTIONS = ("moe", "distillation")
"""The sections whose keys' null is Megatron's default: a launch that leaves them there sets none."""


def _schema_defaults() -> dict[str, Any]:
    out = {}
    for section, info in Recipe.model_fields.items():
        model = section_class(info.annotation)
        if model is None:
            continue
        for name, field_info in model.model_fields.items():
            out[f"{section}.{name}"] = field_info.get_default(call_default_factory=True)
    return out


def _checkpointing(resolved: dict[str, Any], consumed: set[str]) -> dict[str, Any]:
    consumed |= {
        "--checkpoint-activations",
        "--deepspeed-activation-checkpointing",
        "--checkpoint-num-layers",
        "--recompute-granularity",
        "--recompute-method",
        "--recompute-num-layers",
        "--partition-activations",
        "--contigious-checkpointing",
        "--checkpoint-in-cpu",
    }
    prefix = "activation_checkpointing."
    if resolved.get("deepspeed_activation_checkpointing") or resolved.get("checkpoint_activations"):
        return {
            prefix + "granularity": "full",
            prefix + "implementation": "deepspeed",
            prefix + "num_layers": resolved.get("checkpoint_num_layers") or 1,
            prefix + "partition_activations": bool(resolved.get("partition_activations")),
            prefix + "contiguous_memory": bool(resolved.get("contigious_checkpointing")),
            prefix + "cpu_checkpointing": bool(resolved.get("checkpoint_in_cpu")),
        }
    granularity = resolved.get("recompute_granularity")
    if granularity is None:
        return {prefix + "granularity": "none"}
    if granularity == "selective":
        return {prefix + "granularity": "selective"}
    return {
        prefix + "granularity": "full",
        prefix + "method": resolved.get("recompute_method") or "uniform",
        prefix + "num_layers": resolved.get("recompute_num_layers") or 1,
    }


ZERO_KEYS = {
    "overlap_comm": "zero.overlap_comm",
    "contiguous_gradients": "zero.contiguous_gradients",
    "reduce_bucket_size": "zero.reduce_bucket_size",
    "allgather_bucket_size": "zero.allgather_bucket_size",
}
STAGE3_KEYS = {
    "stage3_prefetch_bucket_size": "zero.prefetch_bucket_size",
    "stage3_param_persistence_threshold": "zero.param_persistence_threshold",
    "stage3_max_live_parameters": "zero.max_live_parameters",
    "stage3_max_reuse_distance": "zero.max_reuse_distance",
}
FP16_KEYS = {
    "initial_scale_power": "precision.initial_scale_power",
    "loss_scale_window": "precision.loss_scale_window",
    "hysteresis": "precision.hysteresis",
    "min_loss_scale": "precision.min_loss_scale",
}


def _from_ds_config(
    ds_config: dict[str, Any], ds_resolved: dict[str, Any], resolved: dict[str, Any], traps: list[str]
) -> dict[str, Any]:
    """The recipe keys the DeepSpeed config decides, as DeepSpeed resolves it (its defaults)."""
    zero = ds_resolved["zero_config"]
    stage = int(zero["stage"])
    keys: dict[str, Any] = {"zero.stage": stage}
    defaults = _schema_defaults()
    if stage in (1, 2, 3):
        for name, key in ZERO_KEYS.items():
            if name == "allgather_bucket_size" and stage == 3:
                continue
            keys[key] = zero[name]
            if name not in ds_config.get("zero_optimization", {}) and defaults[key] != zero[name]:
                traps.append(
                    f"{key}: your DeepSpeed config leaves zero_optimization.{name} to DeepSpeed's default "
                    f"{zero[name]!r} at stage {stage}; zerolab's default is {defaults[key]!r}: the recipe "
                    f"keeps {zero[name]!r}"
                )
    if stage == 3:
        for name, key in STAGE3_KEYS.items():
            if name in ds_config.get("zero_optimization", {}):
                keys[key] = int(ds_config["zero_optimization"][name])
    offload = ds_config.get("zero_optimization", {}).get("offload_optimizer", {})
    keys["zero.offload_optimizer"] = offload.get("device") == "cpu"
    if "pin_memory" in offload:
        keys["zero.pin_memory"] = offload["pin_memory"]
    if "ratio" in offload:
        keys["zero.offload_ratio"] = offload["ratio"]
    keys["zero.offload_param"] = (
        stage == 3 and ds_config.get("zero_optimization", {}).get("offload_param", {}).get("device") == "cpu"
    )
    keys["precision.fp16"] = bool(resolved.get("fp16"))
    keys["precision.bf16"] = bool(resolved.get("bf16"))
    for name, key in FP16_KEYS.items():
        if name in ds_config.get("fp16", {}):
            keys[key] = ds_config["fp16"][name]
    clipping = ds_resolved.get("gradient_clipping", 0.0)
    if clipping != resolved.get("clip_grad"):
        traps.append(
            f"train.clip_grad: your launch passes --clip-grad {resolved.get('clip_grad')} and DeepSpeed "
            f"gradient_clipping {clipping}; under DeepSpeed only the latter clips, and train.clip_grad sets "
            f"both: the recipe keeps {clipping}"
        )
    keys["train.clip_grad"] = clipping
    keys["train.prescale_gradients"] = bool(ds_resolved.get("prescale_gradients"))
    keys["logging.wall_clock_breakdown"] = bool(ds_config.get("wall_clock_breakdown", False))
    per_step = (resolved.get("micro_batch_size") or 1) * (resolved.get("data_parallel_size") or 1)
    derived = (resolved.get("global_batch_size") or 0) // per_step
    if ds_config.get("gradient_accumulation_steps", derived) != derived:
        keys["train.gradient_accumulation_steps"] = ds_config["gradient_accumulation_steps"]
    keys["precision.grad_accum_dtype"] = ds_config.get("data_types", {}).get("grad_accum_dtype")
    profiler = ds_config.get("flops_profiler", {})
    if profiler.get("enabled"):
        keys["logging.flops_profiler_step"] = profiler.get("profile_step", FLOPS_PROFILER_STEP)
        keys["logging.flops_profiler_top_modules"] = profiler.get("top_modules")
    return keys | _curriculum(ds_config)


CURRICULUM_KEYS = {
    "min_difficulty": "curriculum.min_seq_length",
    "max_difficulty": "curriculum.max_seq_length",
    "schedule_type": "curriculum.schedule",
    "schedule_config.total_curriculum_step": "curriculum.steps",
    "schedule_config.difficulty_step": "curriculum.difficulty_step",
    "schedule_config.root_degree": "curriculum.root_degree",
}
"""The ds_config curriculum_learning keys the curriculum section renders (with enabled and
curriculum_type seqlen)."""


def _ported_curriculum(ds_config: dict[str, Any]) -> dict[str, Any] | None:
    """The ds_config's curriculum_learning block where the curriculum section expresses it: on, of
    sequence length, on a schedule the section has, with no key it does not render."""
    block = ds_config.get("curriculum_learning")
    if not isinstance(block, dict) or block.get("enabled") is not True:
        return None
    schedule = block.get("schedule_config", {})
    known = {"enabled", "curriculum_type", *(key.split(".")[0] for key in CURRICULUM_KEYS)}
    if (
        block.get("curriculum_type") != "seqlen"
        or block.get("schedule_type") not in ("fixed_linear", "fixed_root")
        or set(block) - known
        or set(schedule) - {key.split(".")[1] for key in CURRICULUM_KEYS if "." in key}
    ):
        return None
    return block


def _curriculum(ds_config: dict[str, Any]) -> dict[str, Any]:
    """The curriculum section's keys of a curriculum_learning block it expresses."""
    block = _ported_curriculum(ds_config)
    if block is None:
        return {}
    keys: dict[str, Any] = {"curriculum.enabled": True}
    for name, key in CURRICULUM_KEYS.items():
        parent, _, leaf = name.rpartition(".")
        node = block.get(parent, {}) if parent else block
        if leaf in node:
            keys[key] = node[leaf]
    return keys


FLOPS_PROFILER_STEP = 1
"""DeepSpeed's flops_profiler.profile_step where an enabled block names none."""


CONSUMED_DS = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "steps_per_print",
    "log_level",
    "gradient_clipping",
    "prescale_gradients",
    "wall_clock_breakdown",
    "bf16.enabled",
    "fp16.enabled",
    "fp16.loss_scale",
    *(f"fp16.{name}" for name in FP16_KEYS),
    "zero_optimization.stage",
    *(f"zero_optimization.{name}" for name in (*ZERO_KEYS, *STAGE3_KEYS)),
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.ratio",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_param.pin_memory",
    "data_types.grad_accum_dtype",
    "flops_profiler.enabled",
    "flops_profiler.profile_step",
    "flops_profiler.top_modules",
}


def _consumed_ds_keys(ds_config: dict[str, Any]) -> set[str]:
    consumed = set(CONSUMED_DS)
    if _ported_curriculum(ds_config) is not None:
        consumed |= {"curriculum_learning.enabled", "curriculum_learning.curriculum_type"}
        consumed |= {f"curriculum_learning.{name}" for name in CURRICULUM_KEYS}
    if ds_config.get("fp16", {}).get("loss_scale", 0) != 0:
        consumed.discard("fp16.loss_scale")
    return consumed


def _remainder(config: dict[str, Any], consumed: set[str], prefix: str = "") -> dict[str, Any]:
    """`config` less the dotted keys `consumed` (a block left empty dropped)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if dotted in consumed:
            continue
        if isinstance(value, dict) and any(name.startswith(dotted + ".") for name in consumed):
            rest = _remainder(value, consumed, dotted + ".")
            if rest:
                out[key] = rest
        else:
            out[key] = value
    return out


def _differences(
    yours: dict[str, Any], mine: dict[str, Any], ds_yours: dict[str, Any], ds_mine: dict[str, Any]
) -> list[str]:
    """Each resolved value the recipe's render changes, with why where zerolab decides it."""
    lines = []
    for key in sorted(set(yours) | set(mine)):
        if key in IGNORED_ARGS:
            continue
        before, after = yours.get(key), mine.get(key)
        if before != after:
            why = WHY.get(key, "")
            lines.append(
                f"Megatron {key}: yours {before!r}, the recipe's {after!r}" + (f" ({why})" if why else "")
            )
    if (yours.get("data_path") or []) != (mine.get("data_path") or []) and len(
        yours.get("data_path") or []
    ) != len(mine.get("data_path") or []):
        lines.append(
            f"Megatron data_path: yours {yours.get('data_path')!r}, the recipe's {mine.get('data_path')!r}"
        )
    for key in sorted(set(ds_yours) | set(ds_mine)):
        before, after = ds_yours.get(key), ds_mine.get(key)
        if key == "zero_config":
            before, after = _offloads_nothing_as_none(before), _offloads_nothing_as_none(after)
        if before != after:
            why = WHY.get(key, "")
            lines.append(
                f"DeepSpeed {key}: yours {before!r}, the recipe's {after!r}" + (f" ({why})" if why else "")
            )
    return lines


def _offloads_nothing_as_none(zero: dict[str, Any] | None) -> dict[str, Any] | None:
    """A resolved zero_config with an offload block of device none as no block: DeepSpeed offloads
    only to cpu or nvme (its ZeRO optimizers test `device != none`)."""
    if zero is None:
        return None
    blocks = ("offload_optimizer", "offload_param")
    idle = [name for name in blocks if isinstance(zero.get(name), dict) and zero[name]["device"] == "none"]
    if int(zero.get("stage", 0)) < 3:
        idle.append("offload_param")  # read by stage 3 alone (runtime/zero/stage3.py)
    return zero | dict.fromkeys(idle)


ENTRY_POINT = re.compile(r"(?:^|/)pretrain_gpt\w*\.py$")
"""The training script of a launch: the engine's pretrain_gpt.py, or a fork's own (pretrain_gpt_alcf.py)."""
SHELLS = ("bash", "sh")
SHELL_OPERATOR = re.compile(r"\|\|?|\|&|&&?|;|\d*>>?.*|&>.*|<.*")
"""A word that ends the command: a pipe, a list operator or a redirection."""


def read_command(text: str, source: str = "the command line") -> tuple[list[str], list[str]]:
    """(launcher up to pretrain_gpt.py, its arguments) of a shell command line (backslash-newlines,
    a leading `VAR=value` and a launch inside `bash -c "..."`, as srun scripts write it, allowed);
    ([], words) when it names no pretrain_gpt.py. UserError, naming `source`, for a line the shell
    could not read or one without a word."""
    words = _shell_words(text, source)
    if not words:
        raise UserError(
            f"{source} holds no command (only blank lines or comments): give the launch's command line, "
            "e.g. `deepspeed pretrain_gpt.py --num-layers 12 ...`, or the arguments after pretrain_gpt.py"
        )
    for index, word in enumerate(words[:-2]):
        if Path(word).name in SHELLS and words[index + 1] == "-c" and "pretrain_gpt" in words[index + 2]:
            words = words[:index] + _shell_words(words[index + 2], source) + words[index + 3 :]
            break
    end = next((i for i, word in enumerate(words) if SHELL_OPERATOR.fullmatch(word)), len(words))
    words = words[:end]  # `2>&1 | tee LOG`: what the shell does with the output
    script = next((i for i, word in enumerate(words) if ENTRY_POINT.search(word)), None)
    if script is None:
        return [], words
    return words[: script + 1], words[script + 1 :]


def _shell_words(text: str, source: str) -> list[str]:
    """The words the shell reads in `text` (comments and line continuations dropped)."""
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
        raise UserError(
            f"{source}: {str(error).lower()}: the shell could not read it either; close the quote (or "
            "escape it) and give the launch's command line as you run it"
        ) from None
