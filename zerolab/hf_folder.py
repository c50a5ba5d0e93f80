"""A Hugging Face GPT-2 as a folder (what save_pretrained writes, or the hub's files of a name):
its config.json, weight files and tokenizer files. Read by `zerolab import` and by the checks of a
fine-tuning recipe, before the engine's Python starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerolab.errors import UserError, json_error_text

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = {"vocab_file": "vocab.json", "merge_file": "merges.txt"}
"""The GPT-2 BPE files, by the recipe key that names them for the engine: a Hugging Face folder
holds them or tokenizer.json (transformers >= 5 saves only that)."""
TOKENIZER_JSON = "tokenizer.json"
HUB_FILES = [
    CONFIG_FILE,
    "*.safetensors",
    "*.safetensors.index.json",
    TOKENIZER_JSON,
    *TOKENIZER_FILES.values(),
]
"""The files of a hub model that make such a folder."""


def looks_like_path(spec: str) -> bool:
    """Whether `spec` can only be a path, never a hub name (`org/name` or `name`)."""
    return Path(spec).exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1


def read_config(folder: Path) -> dict[str, Any]:
    """FOLDER/config.json of a GPT-2; UserError when it is missing, not JSON or not a GPT-2's."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise UserError(f"{path} not found: {folder} is not a Hugging Face model folder")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not JSON ({json_error_text(error, with_line=True)})") from None
    if not isinstance(config, dict) or config.get("model_type") != "gpt2":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise UserError(f"{path}: model_type {kind!r}, not 'gpt2': zerolab takes GPT-2 models only")
    return config


def missing_files(folder: Path) -> str | None:
    """What a model folder lacks of its weights and tokenizer, with the fix; None when it has both."""
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        return f"{folder}: no weights ({', '.join(WEIGHT_FILES)}); save the model with save_pretrained"
    has_bpe_files = all((folder / name).is_file() for name in TOKENIZER_FILES.values())
    if not has_bpe_files and not (folder / TOKENIZER_JSON).is_file():
        return (
            f"{folder}: no tokenizer ({TOKENIZER_JSON}, or {' and '.join(TOKENIZER_FILES.values())}): the "
            "tokenizer its token ids belong to is missing; save it there "
            "(AutoTokenizer.from_pretrained(NAME).save_pretrained(DIR))"
        )
    return None


def shape(config: dict[str, Any]) -> dict[str, Any]:
    """The model's shape in the recipe's model keys, from a GPT-2 config.json (GPT2Config's
    defaults where a key is left out)."""
    return {
        "num_layers": config.get("n_layer", 12),
        "hidden_size": config.get("n_embd", 768),
        "num_attention_heads": config.get("n_head", 12),
        "max_position_embeddings": config.get("n_positions", 1024),
        "vocab_size": config.get("vocab_size", 50257),
    }


def cached_hub_folder(name: str) -> Path | None:
    """The folder of hub model `name` in this machine's Hugging Face cache, when its config.json is
    there (nothing is downloaded); None otherwise."""
    # huggingface_hub comes with datasets; only a hub name needs it
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, CONFIG_FILE)
    except ValueError:  # not a valid repository name
        return None
    return Path(found).parent if isinstance(found, str) else None
