"""Generate docs/recipe-reference.md from the schema, the building blocks and the shipped
recipes: `python -m zerolab.recipe.reference` (or `make docs`); `--check` exits 1 when
the file on disk is stale."""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from zerolab.files import generated_doc_main
from zerolab.locations import CONFIGS_DIR, RECIPES_DIR, REPO_ROOT
from zerolab.recipe import length as length_module
from zerolab.recipe.destinations import destinations
from zerolab.recipe.schema import SECTIONS, Recipe, section_class
from zerolab.recipe.yaml_io import read_yaml_mapping

REFERENCE_FILE = REPO_ROOT / "docs" / "recipe-reference.md"

INTRO = """\
# Recipe reference

Generated from `zerolab/recipe/schema.py` by `make docs` (`python -m zerolab.recipe.reference`);
do not edit by hand: a test fails when this file is stale.

A recipe is a YAML file. It is composed in this order, later values winning:

1. the building blocks listed in `base:` (files under `configs/`, named without `.yaml`,
   e.g. `model/gpt2-1.5b`), deep-merged in order;
2. the recipe's own keys;
3. command-line overrides, `key.path=value` (the value is read as YAML, so `6e-4` is a
   number and `null` clears a key), or `SECTION=NAME`, which swaps in the block
   `configs/SECTION/NAME.yaml` at that point (e.g. `model=gpt2-355m`, `zero=z3_offload`):
   what earlier blocks of that section set is dropped first, so `gpt2_dp zero=z2` is exactly
   `gpt2_z2`; the recipe's own keys and earlier overrides stay unless the block sets them.

Unknown keys are rejected with the nearest valid key; every error names the file or
override that set the key. Then the checks run (batch arithmetic, divisibility of heads and
layers, ZeRO with pipeline parallelism, offload, precision, attention, launcher and nodes); each
failure names its keys and the fix, and nothing is written.

Every relative path a user gives is relative to the current directory: a recipe file (else a
name under `recipes/`, e.g. `cpu/tiny_z1`), the paths in a recipe (`data.path`, the tokenizer
files, `hardware.hostfile`), `zerolab prep --out`, `zerolab launch --run-dir` and
`zerolab render --out`. `zerolab launch` starts the run in the current directory and puts run
directories under `logs/` there. The shipped recipes and building blocks are found inside the
zerolab package, from any directory, in a checkout and in an installed wheel alike.

## Rendering

`zerolab render RECIPE [KEY=VALUE ...] [--dry-run] [--json]` prints the launcher command
line, its environment and the DeepSpeed config, all from the same numbers: `--zero-stage`
is the ds_config stage; `--micro-batch-size`/`--global-batch-size` and
`train_micro_batch_size_per_gpu`/`train_batch_size`/`gradient_accumulation_steps` come
from `train`; `steps_per_print` is `train.log_interval` and `log_level` is `info`, so
DeepSpeed's throughput and memory lines reach the log. With pipeline size 1 the render
adds `--no-pipeline-parallel`; optimizer offload adds `--cpu-optimizer`, weight offload
`--remote-device cpu`; on CPU it sets `DS_ACCELERATOR=cpu`, `--distributed-backend gloo` and,
under torchrun, `LOCAL_SIZE`. It renders `--no-gradient-accumulation-fusion` everywhere (at the
pinned commit the fusion's kernel call is commented out, and only its apex import is left) and
`--no-masked-softmax-fusion` on CPU, where the engine would pick its CUDA softmax kernel in bf16,
and wherever attention is sdpa or flash, which never call it: then no launch builds the fused
kernels.
The recipe's `speed` switches go to `ZEROLAB_SPEED` (docs/speed.md).
`model.attention` `sdpa` sets `ZEROLAB_ATTENTION=sdpa` (zerolab's `sdpa_attention` patch,
printed at the top of `train.log`; `zerolab launch` drops a value inherited from the shell),
`flash` adds `--use-flash-attn-v2`. ZeRO keys go into the ds_config only at the stages that read
them (`allgather_bucket_size` at 1 and 2, the `stage3_*` knobs at 3; setting a stage-3 knob at
another stage is refused). `activation_checkpointing` renders Megatron's
`--recompute-granularity/-method/-num-layers`, or with `implementation: deepspeed`
`--checkpoint-activations --deepspeed-activation-checkpointing` and the ds_config
`activation_checkpointing` block. Everything the run reads from or writes into its run
directory (`--deepspeed_config`, `--save`, `--tensorboard-dir`, `--wandb-save-dir`) is under
`${{RUN_DIR}}`: `zerolab launch` creates the directory (logs/NAME/TIMESTAMP, or `--run-dir`) and
renders with its path, `zerolab launch --dry-run --run-dir DIR` prints exactly that launch, and
`zerolab render --out DIR` writes `DIR/ds_config.json` and `DIR/command.sh`. `--resume RUN_DIR`
(launch and render) adds `--load RUN_DIR/checkpoints`, and `--override-opt_param-scheduler` when
the learning-rate schedule differs from the saved one; what a checkpoint cannot carry (the keys in
`zerolab/recipe/resumption.py`: ZeRO stage, tensor, pipeline and data-parallel sizes, precision,
model shape) is refused before launch, as is a resume with nothing left to train.

Where each key goes is declared on its schema field (the "goes to" column below, from
`zerolab/recipe/destinations.py`); the render is generic over the keys that map one to one.

### Settings the schema does not know

`extra.megatron_args` (a list of tokens) is appended to the Megatron arguments and
`extra.ds_config` (a mapping) merged into the DeepSpeed config. Both may only add: a flag or
key that zerolab renders from the recipe's own keys is refused, naming the keys to set
instead. Where the engine is set up, `render` and `launch` then have Megatron's parser and
DeepSpeed's config classes judge the whole render (about 3 s) and refuse, before anything is
written, what they reject, and an `extra.ds_config` key that DeepSpeed never reads (it ignores
those silently: `comms_loger`, `flops_profiler.profile_stp`), named with the key it does read;
without the engine a dry run warns that it could not check them.

### Training length

{length}
"""


def generate() -> str:
    """The full text of docs/recipe-reference.md."""
    parts = [
        INTRO.format(
            length=(length_module.__doc__ or "").strip(),
        )
    ]
    parts.append(_section_table("Top level", Recipe, skip=SECTIONS))
    for name in SECTIONS:
        model = section_class(Recipe.model_fields[name].annotation)
        assert model is not None
        parts.append(_section_table(f"`{name}`", model, prefix=f"{name}."))
    parts.append(_files_table("Building blocks (`configs/`)", CONFIGS_DIR, "block"))
    parts.append(_files_table("Shipped recipes (`recipes/`)", RECIPES_DIR, "recipe"))
    return "\n".join(parts)


def _section_table(title: str, model: type[BaseModel], prefix: str = "", skip: tuple[str, ...] = ()) -> str:
    lines = [f"## {title}", "", (model.__doc__ or "").strip(), ""]
    lines += ["| key | type | default | unit | meaning | goes to |", "|---|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        default = info.get_default(call_default_factory=True)
        goes_to = "; ".join(destination.describe() for destination in destinations(info))
        lines.append(
            f"| `{prefix}{name}` | {_type_name(info.annotation)}{_bounds(info)} | {_default_text(default)} | "
            f"{extra.get('unit', '')} | {info.description} | {goes_to} |"
        )
    return "\n".join(lines) + "\n"


def _files_table(title: str, root: Any, kind: str) -> str:
    lines = [f"## {title}", "", f"| {kind} | what |", "|---|---|"]
    for path in sorted(root.rglob("*.yaml")):
        name = str(path.relative_to(root).with_suffix(""))
        what = read_yaml_mapping(path).get("description") or _first_comment(path)
        lines.append(f"| `{name}` | {what} |")
    return "\n".join(lines) + "\n"


def _first_comment(path: Any) -> str:
    """The file's opening comment, its lines joined: a block's description."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return " or ".join(_type_name(arg) for arg in args) + " or null"
    if origin is list:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info: FieldInfo) -> str:
    """The field's numeric bounds (`, > 0, <= 65536`), from its constraints."""
    words = {
        annotated_types.Gt: ">",
        annotated_types.Ge: ">=",
        annotated_types.Lt: "<",
        annotated_types.Le: "<=",
    }
    bounds = [
        f"{words[type(item)]} {getattr(item, type(item).__name__.lower())}"
        for item in info.metadata
        if type(item) in words
    ]
    return "".join(f", {bound}" for bound in bounds)


def _default_text(default: Any) -> str:
    if isinstance(default, BaseModel):
        return "(section)"
    if default is None:
        return "null"
    if isinstance(default, bool):
        return str(default).lower()
    if default == [] or default == "":
        return f"`{default!r}`".replace("'", '"')
    return f"`{default}`"


def main(argv: list[str] | None = None) -> int:
    """Write the reference, or with --check report whether it is stale."""
    return generated_doc_main(REFERENCE_FILE, generate, argv)


if __name__ == "__main__":
    sys.exit(main())
