"""A Megatron-DeepSpeed GPT checkpoint written as a Hugging Face GPT-2 directory: safetensors weights,
config.json with the run's shape and activation, and the GPT-2 tokenizer files. The weight mapping
between the two is owned here, both ways (megatron_from_hf and split_tensor_parallel are the
inverses of hf_state and the tensor-parallel merge, for importing Hugging Face GPT-2), and so are
the engine's model and layer files (nested_module and layer_files write what _flat and
_layer_files_state read).

Run by the engine's Python (torch, DeepSpeed and transformers are there, not in zerolab's own
environment): `python hf_gpt2.py REQUEST.json`. The request names the checkpoints folder, the
iteration, the tensor- and pipeline-parallel sizes, the ZeRO stage, the tokenizer's vocabulary size
and files, and the output folder. ZeRO-3 checkpoints hold each weight in pieces across ranks: they
are put back together by DeepSpeed's own zero_to_fp32; the other stages keep whole weights in each
tensor-parallel rank's model file, merged here along the dimension Megatron splits them. A
checkpoint this cannot read exits with status 2 and one line naming the file."""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import json
import pickle
import re
import sys
import types
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from zerolab.rank.collector import collector_paused

with collector_paused():
    import torch
    from safetensors.torch import save_file

    from zerolab.contracts import FSDP2_PROGRESS_FILE, step_folder
    from zerolab.rank.prompt_exit import exit_now
    from zerolab.rank.workarounds import deepspeed_without_its_unused_imports

CHECKPOINT_VERSION = 3.0
"""What the pinned engine writes (megatron/checkpointing.py)."""

COLUMN_PARALLEL = ("word_embeddings.weight", "dense_h_to_4h.weight", "dense_h_to_4h.bias")
ROW_PARALLEL = ("self_attention.dense.weight", "mlp.dense_4h_to_h.weight")
QKV = ("query_key_value.weight", "query_key_value.bias")
"""Weights Megatron splits across tensor-parallel ranks: along the output dimension (0) or the input
dimension (1); the fused QKV along 0 within each of q, k and v (a rank holds [q, k, v] of its own
heads, the whole model [q, k, v] of all heads: GPT-2's c_attn order); every other weight is the
same on each rank."""


class CheckpointError(Exception):
    """A checkpoint this cannot read: the message names the file and what is wrong."""


ANOTHER_ITERATION = (
    "copy the checkpoint again if it was copied here, or export another iteration it saved (--iteration)"
)


def _unreadable(path: Path, error: Exception) -> CheckpointError:
    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return CheckpointError(
        f"{path}: cut short or damaged, not a checkpoint torch can read ({said}); {ANOTHER_ITERATION}"
    )


@functools.cache
def _module_alone(fullname: str) -> types.ModuleType | None:
    """Module `fullname` of the engine executed from its own file, its packages' `__init__` not run
    (Megatron's imports DeepSpeed: about 10 s on 2 cores); None where it is not that self-contained."""
    top, _, rest = fullname.partition(".")
    package = importlib.machinery.PathFinder.find_spec(top)
    if package is None or not package.submodule_search_locations or not rest:
        return None
    file = Path(package.submodule_search_locations[0], *rest.split(".")).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(fullname, file)
    if spec is None or spec.loader is None or not file.is_file():
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # it needs its package (a relative import, say): only the real import gives it
        return None
    return module


class _CheckpointUnpickler(pickle.Unpickler):
    """Unpickles a checkpoint's Megatron objects (its arguments hold `megatron.core.enums.ModelType`)
    from their modules alone where they are self-contained, without importing Megatron and DeepSpeed."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("megatron.") and module not in sys.modules:
            alone = _module_alone(module)
            if alone is not None and hasattr(alone, name):
                return getattr(alone, name)
        return super().find_class(module, name)


CHECKPOINT_PICKLE = types.ModuleType("checkpoint_pickle", "pickle, with _CheckpointUnpickler")
CHECKPOINT_PICKLE.Unpickler = _CheckpointUnpickler  # type: ignore[attr-defined]
CHECKPOINT_PICKLE.load = pickle.load  # type: ignore[attr-defined]


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (the checkpoint is incomplete); {ANOTHER_ITERATION}")
    try:
        # The run's own file; its `args` is an argparse Namespace, so not weights only.
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=CHECKPOINT_PICKLE)
    except Exception as error:  # any unreadable file is reported the same way
        raise _unreadable(path, error) from None


@contextlib.contextmanager
def _megatron_objects_alone() -> Iterator[None]:
    """torch.load (DeepSpeed's zero_to_fp32 calls it) unpickles a checkpoint's Megatron objects as
    _load does, without importing Megatron."""
    load = torch.load
    torch.load = functools.partial(load, pickle_module=CHECKPOINT_PICKLE)
    try:
        yield
    finally:
        torch.load = load


def _zero3_state(checkpoints: Path, tag: str) -> dict[str, torch.Tensor]:
    """The whole model's weights put back together from a ZeRO-3 checkpoint's pieces by DeepSpeed's
    zero_to_fp32; CheckpointError naming the file it could not read."""
    # here, not at the top: no other checkpoint (nor the import of Hugging Face weights, which
    # shares this module) needs DeepSpeed
    deepspeed_without_its_unused_imports()
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # noqa: PLC0415

    try:
        with _megatron_objects_alone():
            return get_fp32_state_dict_from_zero_checkpoint(str(checkpoints), tag=tag)
    except Exception as error:  # name the file: torch.load's own errors do not
        for path in sorted((checkpoints / tag).glob("*.pt")):
            try:
                with zipfile.ZipFile(path):  # torch's files are zip archives; one cut short has lost its end
                    pass
            except (OSError, zipfile.BadZipFile) as bad:
                raise _unreadable(path, bad) from None
        raise CheckpointError(
            f"{checkpoints / tag}: DeepSpeed's zero_to_fp32 cannot put its ZeRO-3 pieces together "
            f"({type(error).__name__}: {error}); {ANOTHER_ITERATION}"
        ) from None


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, torch.Tensor]:
    """Megatron's nested state dict (`language_model` > `encoder` > ...) as dotted parameter names."""
    flat: dict[str, torch.Tensor] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        elif isinstance(value, torch.Tensor):
            flat[f"{prefix}{key}"] = value
    return flat


def _layer_files_state(step_dir: Path, tensor_rank: int) -> dict[str, torch.Tensor]:
    """A pipeline checkpoint's layer files of one tensor-parallel rank, named as an unsplit model's."""
    files = sorted(step_dir.glob(f"layer_*-model_{tensor_rank:02d}-model_states.pt"))
    if not files:
        raise CheckpointError(f"{step_dir}: no layer_*-model_{tensor_rank:02d}-model_states.pt files")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        weights = _load(path)
        if "word_embeddings.weight" in weights:
            if "language_model.embedding.word_embeddings.weight" not in state:
                state |= {f"language_model.embedding.{k}": v for k, v in weights.items()}
        elif "input_layernorm.weight" in weights:
            # by the file's own index, so that a file missing leaves its layer's weights missing
            layer = int(path.name.split("-")[0].removeprefix("layer_")) - EMBEDDING_LAYER - 1
            state |= {f"language_model.encoder.layers.{layer}.{k}": v for k, v in weights.items()}
        elif set(weights) <= {"weight", "bias"}:
            state |= {f"language_model.encoder.final_layernorm.{k}": v for k, v in weights.items()}
        else:
            raise CheckpointError(f"{path}: a pipeline layer of unknown kind ({', '.join(sorted(weights))})")
    return state


EMBEDDING_LAYER = 1
"""The pipeline layer index of the embedding; transformer layer i is EMBEDDING_LAYER + 1 + i, the
final layer norm follows."""


def nested_module(flat: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Megatron's GPTModel state as it saves it in a model file: language_model > embedding >
    word_embeddings > weight, and the encoder's weights by their dotted names (the inverse of _flat)."""
    embedding: dict[str, dict[str, torch.Tensor]] = {}
    encoder: dict[str, torch.Tensor] = {}
    for name, tensor in flat.items():
        rest = name.removeprefix("language_model.")
        if rest.startswith("embedding."):
            module, kind = rest.removeprefix("embedding.").split(".")
            embedding.setdefault(module, {})[kind] = tensor
        else:
            encoder[rest.removeprefix("encoder.")] = tensor
    return {"language_model": {"embedding": embedding, "encoder": encoder}}


def layer_files(flat: dict[str, torch.Tensor], num_layers: int) -> dict[int, dict[str, torch.Tensor]]:
    """One tensor-parallel rank's weights by pipeline layer index, named as each layer saves them in
    its layer file (what _layer_files_state reads back)."""
    layers: dict[int, dict[str, torch.Tensor]] = {}
    final = EMBEDDING_LAYER + 1 + num_layers
    for name, tensor in flat.items():
        if name.startswith("language_model.embedding."):
            layers.setdefault(EMBEDDING_LAYER, {})[name.removeprefix("language_model.embedding.")] = tensor
        elif name.startswith("language_model.encoder.final_layernorm."):
            layers.setdefault(final, {})[name.rsplit(".", 1)[1]] = tensor
        else:
            layer, rest = name.removeprefix("language_model.encoder.layers.").split(".", 1)
            layers.setdefault(EMBEDDING_LAYER + 1 + int(layer), {})[rest] = tensor
    return layers


def _merge_tensor_parallel(ranks: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    if len(ranks) == 1:
        return ranks[0]
    merged = {}
    for name, first in ranks[0].items():
        pieces = [rank[name] for rank in ranks]
        if name.endswith(QKV):
            by_kind = [piece.chunk(3, dim=0) for piece in pieces]
            merged[name] = torch.cat([torch.cat([rank[kind] for rank in by_kind]) for kind in range(3)])
        elif name.endswith(COLUMN_PARALLEL):
            merged[name] = torch.cat(pieces, dim=0)
        elif name.endswith(ROW_PARALLEL):
            merged[name] = torch.cat(pieces, dim=1)
        else:
            merged[name] = first
    return merged


def split_tensor_parallel(merged: dict[str, torch.Tensor], tensor: int) -> list[dict[str, torch.Tensor]]:
    """The whole model's weights as `tensor` ranks hold them: the inverse of the merge above."""
    if tensor == 1:
        return [merged]
    ranks: list[dict[str, torch.Tensor]] = [{} for _ in range(tensor)]
    for name, whole in merged.items():
        if name.endswith(QKV):
            by_kind = [kind.chunk(tensor, dim=0) for kind in whole.chunk(3, dim=0)]
            pieces = [torch.cat([kind[rank] for kind in by_kind]) for rank in range(tensor)]
        elif name.endswith(COLUMN_PARALLEL):
            pieces = list(whole.chunk(tensor, dim=0))
        elif name.endswith(ROW_PARALLEL):
            pieces = list(whole.chunk(tensor, dim=1))
        else:
            pieces = [whole] * tensor
        for rank, piece in zip(ranks, pieces, strict=True):
            rank[name] = piece.clone().contiguous()
    return ranks


def megatron_state(request: dict[str, Any]) -> tuple[dict[str, torch.Tensor], Any]:
    """The whole model's weights by Megatron's parameter names, and the run's saved arguments."""
    checkpoints, tag = Path(request["checkpoints"]), f"global_step{request['iteration']}"
    step_dir = checkpoints / tag
    if not step_dir.is_dir():
        raise CheckpointError(f"{step_dir}: missing (no checkpoint at iteration {request['iteration']})")
    # the run's arguments and version are in every model-states file; ZeRO-3 names them per rank
    zero3 = request["zero_stage"] == 3
    states = step_dir / f"{'zero_pp_rank_0_' if zero3 else ''}mp_rank_00_model_states.pt"
    first = _load(states)
    version = first.get("checkpoint_version")
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{states}: checkpoint_version {version}, not the {CHECKPOINT_VERSION} of the pinned "
            "engine (written by another engine version)"
        )
    tensor, pipeline = request["tensor_parallel"], request["pipeline_parallel"]
    if zero3:
        return _zero3_state(checkpoints, tag), first["args"]
    if pipeline > 1:
        ranks = [_layer_files_state(step_dir, rank) for rank in range(tensor)]
    else:
        models = [first] + [_load(step_dir / f"mp_rank_{r:02d}_model_states.pt") for r in range(1, tensor)]
        ranks = [_flat(model["module"]) for model in models]
    return _merge_tensor_parallel(ranks), first["args"]


def layout_state(folder: Path) -> dict[str, torch.Tensor]:
    """The weights of an imported one-layout checkpoint (`zerolab import`'s tp1_pp1 folder: the files
    the engine loads with --load-tag) by Megatron's parameter names."""
    states = folder / "mp_rank_00_model_states.pt"
    if not states.is_file():
        raise CheckpointError(f"{states}: missing (not a checkpoint of one layout, tensor and pipeline 1)")
    return _flat(_load(states)["module"])


_LAYER = re.compile(r"^language_model\.encoder\.layers\.(\d+)\.(.+)$")
_LAYER_NAMES = {
    "input_layernorm": "ln_1",
    "self_attention.query_key_value": "attn.c_attn",
    "self_attention.dense": "attn.c_proj",
    "post_attention_layernorm": "ln_2",
    "mlp.dense_h_to_4h": "mlp.c_fc",
    "mlp.dense_4h_to_h": "mlp.c_proj",
}
_LINEAR = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
"""HF GPT-2's Conv1D keeps a weight as (in, out), the transpose of Megatron's Linear."""


def hf_state(megatron: dict[str, torch.Tensor], vocab_size: int) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's weights (the output layer is tied to wte), in fp32."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in megatron.items():
        tensor = tensor.detach().to(torch.float32)
        if name == "language_model.embedding.word_embeddings.weight":
            out["transformer.wte.weight"] = tensor[:vocab_size]
        elif name == "language_model.embedding.position_embeddings.weight":
            out["transformer.wpe.weight"] = tensor
        elif name.startswith("language_model.encoder.final_layernorm."):
            out[f"transformer.ln_f.{name.rsplit('.', 1)[1]}"] = tensor
        elif match := _LAYER.match(name):
            layer, rest = match.groups()
            module, kind = rest.rsplit(".", 1)
            if module not in _LAYER_NAMES:
                raise CheckpointError(f"a weight GPT-2 has no place for: {name}")
            hf = _LAYER_NAMES[module]
            if hf in _LINEAR and kind == "weight":
                tensor = tensor.t()
            out[f"transformer.h.{layer}.{hf}.{kind}"] = tensor.contiguous()
        elif name != "word_embeddings_for_head.weight":
            raise CheckpointError(f"a weight GPT-2 has no place for: {name}")
    return out


_GPT2_LAYER_NAMES = [f"{module}.{kind}" for module in _LAYER_NAMES.values() for kind in ("weight", "bias")]


def gpt2_names(num_layers: int) -> list[str]:
    """The tensors of GPT2LMHeadModel (its output layer tied to wte) of `num_layers` layers."""
    layers = [f"transformer.h.{layer}.{name}" for layer in range(num_layers) for name in _GPT2_LAYER_NAMES]
    ends = ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    return ["transformer.wte.weight", "transformer.wpe.weight", *layers, *ends]


def _layer_order(name: str) -> tuple[int, str]:
    match = _HF_LAYER.match(name)
    return (int(match[1]) if match else -1, name)


_HF_LAYER = re.compile(r"^transformer\.h\.(\d+)\.(.+)\.(weight|bias)$")


def megatron_from_hf(hf: dict[str, torch.Tensor], padding: torch.Tensor) -> dict[str, torch.Tensor]:
    """Megatron's weights (an unsplit model's names) from GPT2LMHeadModel's: the inverse of hf_state.
    `padding` holds the rows the engine's padded vocabulary adds below wte's."""
    by_hf = {hf_name: module for module, hf_name in _LAYER_NAMES.items()}
    head, embedding = hf.get("lm_head.weight"), hf.get("transformer.wte.weight")
    if embedding is None:
        raise CheckpointError("no transformer.wte.weight: not a GPT-2 (GPT2LMHeadModel) state")
    if head is not None and not torch.equal(head, embedding):
        raise CheckpointError(
            "lm_head.weight differs from transformer.wte.weight: the engine's GPT ties them"
        )
    out: dict[str, torch.Tensor] = {}
    for name, tensor in hf.items():
        tensor = tensor.detach().to(torch.float32)
        if name == "transformer.wte.weight":
            out["language_model.embedding.word_embeddings.weight"] = torch.cat([tensor, padding.to(tensor)])
        elif name == "transformer.wpe.weight":
            out["language_model.embedding.position_embeddings.weight"] = tensor
        elif name.startswith("transformer.ln_f."):
            out[f"language_model.encoder.final_layernorm.{name.rsplit('.', 1)[1]}"] = tensor
        elif match := _HF_LAYER.match(name):
            layer, hf_name, kind = match.groups()
            if hf_name not in by_hf:
                raise CheckpointError(f"a weight the engine's GPT has no place for: {name}")
            if hf_name in _LINEAR and kind == "weight":
                tensor = tensor.t()
            out[f"language_model.encoder.layers.{layer}.{by_hf[hf_name]}.{kind}"] = tensor.contiguous()
        elif name != "lm_head.weight" and not name.endswith((".attn.bias", ".attn.masked_bias")):
            raise CheckpointError(f"a weight the engine's GPT has no place for: {name}")
    return out


def hf_config(args: Any, vocab_size: int) -> dict[str, Any]:
    """GPT2Config's fields for the run: its shape, dropouts, layer-norm epsilon and activation (the
    engine's fused bias-GeLU and --openai-gelu are the tanh approximation, `gelu_new`)."""
    tanh_gelu = getattr(args, "bias_gelu_fusion", False) or getattr(args, "openai_gelu", False)
    ffn = getattr(args, "ffn_hidden_size", None)
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": vocab_size,
        "n_positions": args.max_position_embeddings,
        "n_embd": args.hidden_size,
        "n_layer": args.num_layers,
        "n_head": args.num_attention_heads,
        "n_inner": None if ffn in (None, 4 * args.hidden_size) else ffn,
        "activation_function": "gelu_new" if tanh_gelu else "gelu",
        "layer_norm_epsilon": args.layernorm_epsilon,
        "resid_pdrop": args.hidden_dropout,
        "embd_pdrop": args.hidden_dropout,
        "attn_pdrop": args.attention_dropout,
        "initializer_range": args.init_method_std,
        "bos_token_id": vocab_size - 1,
        "eos_token_id": vocab_size - 1,
        "tie_word_embeddings": True,
    }


def fsdp2_state(request: dict[str, Any], vocab_size: int) -> tuple[dict[str, torch.Tensor], Any]:
    """An FSDP2 run's weights as GPT2LMHeadModel's (the padded rows and the tied head left out) from
    its sharded checkpoint, put together by torch.distributed.checkpoint without a process group, and
    the run's arguments as Megatron's names hold them (for hf_config), from the model it saved."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: PLC0415

    step_dir = Path(request["checkpoints"]) / step_folder(request["iteration"])
    try:
        model = json.loads((step_dir / FSDP2_PROGRESS_FILE).read_text())["model"]
    except (OSError, ValueError, KeyError) as error:
        raise _unreadable(step_dir / FSDP2_PROGRESS_FILE, error) from None
    whole = Path(request["out"]) / "whole.pt"
    try:
        dcp_to_torch_save(str(step_dir), str(whole))
        state = torch.load(whole, weights_only=True)["model"]
    except (OSError, RuntimeError, ValueError, KeyError) as error:
        raise _unreadable(step_dir, error) from None
    finally:
        whole.unlink(missing_ok=True)
    weights = {
        name: tensor.detach().to(torch.float32).contiguous()
        for name, tensor in state.items()
        if name != "lm_head.weight"
    }
    weights["transformer.wte.weight"] = weights["transformer.wte.weight"][:vocab_size].contiguous()
    args = types.SimpleNamespace(
        num_layers=model["n_layer"],
        hidden_size=model["n_embd"],
        num_attention_heads=model["n_head"],
        max_position_embeddings=model["n_positions"],
        ffn_hidden_size=None,
        bias_gelu_fusion=model["activation_function"] == "gelu_new",
        layernorm_epsilon=model["layer_norm_epsilon"],
        hidden_dropout=model["resid_pdrop"],
        attention_dropout=model["attn_pdrop"],
        init_method_std=model["initializer_range"],
    )
    return weights, args


def export(request: dict[str, Any]) -> None:
    """Write the request's checkpoint into its `out` folder as a Hugging Face GPT-2 directory."""
    vocab_size = request["vocab_size"]
    if request.get("engine") == "fsdp2":
        weights, args = fsdp2_state(request, vocab_size)
    else:
        megatron, args = megatron_state(request)
        if getattr(args, "num_experts", [1]) not in (None, [1], 1) or getattr(args, "swiglu", False):
            raise CheckpointError(
                "the run is not a GPT-2 (mixture of experts or SwiGLU): nothing to export to"
            )
        weights = hf_state(megatron, vocab_size)
    missing = sorted(set(gpt2_names(args.num_layers)) - set(weights), key=_layer_order)
    if missing:
        shown = ", ".join(missing[:4]) + (f", and {len(missing) - 4} more" if len(missing) > 4 else "")
        step_dir = Path(request["checkpoints"]) / f"global_step{request['iteration']}"
        raise CheckpointError(
            f"{step_dir}: {len(missing)} tensors of the run's {args.num_layers}-layer GPT-2 missing "
            f"({shown}): a file of the checkpoint is missing; {ANOTHER_ITERATION}"
        )
    out = Path(request["out"])
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = hf_config(args, vocab_size) | {"zerolab": request["provenance"]}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    from transformers import GPT2TokenizerFast  # noqa: PLC0415 (here: after DeepSpeed's import, if any)

    tokenizer = GPT2TokenizerFast(vocab=request["vocab_file"], merges=request["merge_file"])
    tokenizer.model_max_length = args.max_position_embeddings
    tokenizer.save_pretrained(str(out))


def request_main(argv: list[str], action: Callable[[dict[str, Any]], None], name: str) -> int:
    """A converter script's command: `action` on the request in file argv[0]; 2 with one line
    `zerolab NAME: ...` on stderr for weights it cannot read (engine/scripts.py reports it)."""
    request = json.loads(Path(argv[0]).read_text())
    try:
        action(request)
    except CheckpointError as error:
        print(f"zerolab {name}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    exit_now(request_main(sys.argv[1:], export, "export"))
