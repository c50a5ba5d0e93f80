"""`zerolab import`: a Hugging Face GPT-2 (a directory, or a hub name fetched on a machine that
reaches the hub) as the engine's checkpoints that a run starts from (model.init_from), one per
parallel layout. What can be judged from config.json and the tokenizer files is judged here, before
the engine's Python starts; the weights are mapped and written by rank/hf_to_engine.py. The output
folder (its manifest: zerolab.imported) appears whole or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from zerolab.contracts import ENGINE_LAYERNORM_EPSILON, rank_script
from zerolab.engine.paths import engine_missing
from zerolab.engine.scripts import run_engine_script
from zerolab.errors import UserError
from zerolab.export.run import refuse_file_in_out
from zerolab.files import folder_written_whole
from zerolab.hf_folder import (
    CONFIG_FILE,
    HUB_FILES,
    TOKENIZER_FILES,
    ask_hub,
    looks_like_path,
    missing_files,
    read_config,
    shape,
    weights_problem,
)
from zerolab.imported import (
    ImportedLayout,
    ImportedShape,
    ImportedWeights,
    layout_tag,
    tokenizer_digest,
    write_manifest,
)
from zerolab.recipe.schema import padded_vocab

CONVERTER = rank_script("hf_to_engine")
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")
"""transformers' names of the tanh approximation of GELU, which GPT-2 uses and the engine's
bias-GeLU computes."""


def resolve_source(model: str) -> Path:
    """MODEL as a local directory: itself, or the hub's files of that name (downloaded where the hub
    can be reached, this machine's cached copy where it cannot)."""
    path = Path(model)
    if path.is_dir():
        return path
    if looks_like_path(model):
        found = "not a directory" if path.exists() else "no such directory"
        raise UserError(f"MODEL {model}: {found}; give a Hugging Face GPT-2 directory or a hub name")
    # huggingface_hub comes with datasets; only a hub name needs it
    from huggingface_hub import snapshot_download

    hub = ask_hub(model)
    fix = "give a local GPT-2 directory (save_pretrained's) or a hub name this machine can fetch"
    if hub.problem is not None and hub.reached:
        raise UserError(f"MODEL {model}: no such directory here, and {hub.problem}; {fix}")
    try:
        return Path(
            snapshot_download(model, allow_patterns=HUB_FILES, local_files_only=hub.problem is not None)
        )
    except Exception as error:  # unknown name, no access, not cached: all the same to the user
        why = hub.problem or f"the Hugging Face hub did not give it ({type(error).__name__}: {error})"
        cached = ", nor has this machine a copy in its Hugging Face cache" if hub.problem else ""
        raise UserError(f"MODEL {model}: no such directory here, and {why}{cached}; {fix}") from None


def _refuse_other_architecture(path: Path, config: dict[str, Any]) -> None:
    """GPT-2 settings the engine's GPT does not compute the same way."""
    hidden = config.get("n_embd", 768)
    differs = {
        "activation_function": (config.get("activation_function", "gelu_new") in TANH_GELU, "gelu_new"),
        "n_inner": (config.get("n_inner") in (None, 4 * hidden), f"null or {4 * hidden}"),
        "scale_attn_weights": (config.get("scale_attn_weights", True) is True, "true"),
        "scale_attn_by_inverse_layer_idx": (
            not config.get("scale_attn_by_inverse_layer_idx", False),
            "false",
        ),
        "add_cross_attention": (not config.get("add_cross_attention", False), "false"),
        "tie_word_embeddings": (config.get("tie_word_embeddings", True) is True, "true"),
        "layer_norm_epsilon": (
            config.get("layer_norm_epsilon", 1e-5) == ENGINE_LAYERNORM_EPSILON,
            str(ENGINE_LAYERNORM_EPSILON),
        ),
    }
    wrong = [
        f"{key}={config.get(key)!r} (the engine's GPT: {wanted})"
        for key, (same, wanted) in differs.items()
        if not same
    ]
    if wrong:
        raise UserError(
            f"{path}: {'; '.join(wrong)}: the engine's GPT would compute another model from these weights"
        )


def read_shape(folder: Path) -> ImportedShape:
    """The model's shape from its config.json; UserError for a directory that is not a GPT-2 the
    engine computes the same way, or has no weights, weights cut short, or no tokenizer."""
    config = read_config(folder)
    _refuse_other_architecture(folder / CONFIG_FILE, config)
    missing = missing_files(folder) or weights_problem(folder)
    if missing:
        raise UserError(missing)
    try:
        return ImportedShape(**shape(config))
    except ValidationError as error:
        wrong = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in error.errors())
        raise UserError(f"{folder / CONFIG_FILE}: a shape that is not whole numbers ({wrong})") from None


def _refuse_layouts(shape: ImportedShape, layouts: list[tuple[int, int]]) -> None:
    for tensor, pipeline in layouts:
        if tensor < 1 or pipeline < 1:
            raise UserError(f"--parallel {tensor}x{pipeline}: sizes are whole numbers of at least 1")
        if shape.num_attention_heads % tensor:
            raise UserError(
                f"--parallel {tensor}x{pipeline}: the model's {shape.num_attention_heads} attention heads "
                f"do not divide by tensor parallel {tensor}; give a tensor-parallel size that divides them"
            )
        if shape.num_layers % pipeline:
            raise UserError(
                f"--parallel {tensor}x{pipeline}: the model's {shape.num_layers} layers do not divide by "
                f"pipeline parallel {pipeline}; give a pipeline-parallel size that divides them"
            )


def import_model(
    model: str, out: Path, layouts: list[tuple[int, int]], divisible_by: int = 1
) -> ImportedWeights:
    """Write MODEL's weights into `out` as the engine's checkpoints of `layouts` ((tensor, pipeline)
    each), the vocabulary padded to a multiple of `divisible_by` x tensor parallel."""
    if out.exists():
        raise UserError(f"--out {out}: already exists; give a new folder")
    refuse_file_in_out(out)
    if divisible_by < 1:
        raise UserError(f"--make-vocab-size-divisible-by {divisible_by}: give a whole number of at least 1")
    source = resolve_source(model)
    shape = read_shape(source)
    layouts = list(dict.fromkeys(layouts))
    _refuse_layouts(shape, layouts)
    missing = engine_missing()
    if missing:
        raise UserError(f"zerolab import writes the checkpoints with the engine's torch: {missing}")
    written = {
        layout_tag(tensor, pipeline): ImportedLayout(
            tensor=tensor,
            pipeline=pipeline,
            padded_vocab_size=padded_vocab(shape.vocab_size, divisible_by, tensor),
        )
        for tensor, pipeline in layouts
    }
    request = {
        "model": str(source),
        "num_layers": shape.num_layers,
        "vocab_size": shape.vocab_size,
        "layouts": [
            [tag, layout.tensor, layout.pipeline, layout.padded_vocab_size] for tag, layout in written.items()
        ],
    }
    with folder_written_whole(out) as partial:
        request["out"] = str(partial)
        try:
            run_engine_script(CONVERTER, request, partial, name="import", echo=True)
        except UserError as error:
            raise UserError(f"MODEL {model}: cannot import it: {error}") from None
        weights = ImportedWeights(
            source=str(source.resolve()) if Path(model).is_dir() else model,
            shape=shape,
            make_vocab_size_divisible_by=divisible_by,
            tokenizer_sha256=tokenizer_digest(*(partial / name for name in TOKENIZER_FILES.values())),
            layouts=written,
        )
        write_manifest(partial, weights)
    return weights
