"""A Hugging Face GPT-2 as a folder (what save_pretrained writes, or the hub's files of a name):
its config.json, weight files and tokenizer files. Read by `zerolab import` and by the checks of a
fine-tuning recipe, before the engine's Python starts."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.parse
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

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


HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
"""What the Hugging Face hub's names can be (models and datasets): `name` or `owner/name`, each
part of letters, digits, `-`, `_` and `.`, starting with a letter or digit."""
HUB_TIMEOUT_S = 10
"""How long zerolab waits for the hub's one answer about a model before taking it as unreachable."""
OFFLINE_WORDS = ("1", "ON", "YES", "TRUE")
"""HF_HUB_OFFLINE's values that mean offline, as huggingface_hub reads them."""


def offline_asked() -> bool:
    """Whether HF_HUB_OFFLINE, as it is now, asks for no network."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in OFFLINE_WORDS


def unreachable_hub(timeout_s: float = 5.0) -> str | None:
    """The Hugging Face hub's host:port (HF_ENDPOINT, by default huggingface.co:443) when it does
    not answer a connection within `timeout_s`; None when it does."""
    url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "", url.port or 443), timeout=timeout_s):
            return None
    except OSError:
        return f"{url.hostname}:{url.port or 443}"


SAFETENSORS_MAX_HEADER = 100_000_000
"""The longest header the safetensors library reads."""


LOCAL_FOLDERS = ("exports", "imports", "logs")
"""Folders zerolab writes under the current directory (`zerolab export --out exports/NAME`, `zerolab
import --out imports/NAME`, run directories): a model named inside one is a local path, even before
the folder exists, never a hub name."""


def looks_like_path(spec: str) -> bool:
    """Whether `spec` can only be a local path, never a hub name: it exists, starts with `.`, `/` or
    `~`, is not of a hub name's form (`owner/name` or `name`: another `/`, a space, a `\\`, `..`,
    `--`), or its first part is an existing folder or one of LOCAL_FOLDERS (`exports/tiny`)."""
    first, slash, _ = spec.partition("/")
    return (
        Path(spec).exists()
        or spec.startswith((".", "/", "~"))
        or not HUB_NAME.fullmatch(spec)
        or ".." in spec
        or "--" in spec
        or (bool(slash) and (first in LOCAL_FOLDERS or Path(first).is_dir()))
    )


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


def _safetensors_problem(path: Path) -> str | None:
    """Why transformers cannot read the safetensors file `path` (cut short, not safetensors), else None:
    8 bytes of header length, the JSON header, then the tensors' bytes at the offsets it gives."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little") if size >= 8 else 0
        if length > SAFETENSORS_MAX_HEADER:
            return "not a safetensors file (its first bytes are not a header's length)"
        if size < 8 or 8 + length > size:
            return f"cut short ({size:,} bytes, not even its whole header)"
        try:
            header = json.loads(handle.read(length))
            ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError):
            return "not a safetensors file (its header is not one)"
    whole = 8 + length + max(ends, default=0)
    if size < whole:
        return f"cut short ({size:,} bytes of the {whole:,} its header describes)"
    if size > whole:
        return f"not a safetensors file ({size - whole:,} bytes more than its header describes)"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """Why torch cannot read the weights file `path` (a zip archive since torch 1.6; a file cut short
    loses the archive's directory at its end), else None."""
    with path.open("rb") as handle:
        legacy = handle.read(2).startswith(b"\x80")  # torch < 1.6 wrote a bare pickle
    if legacy or zipfile.is_zipfile(path):
        return None
    return "cut short or not a torch file (no zip archive's directory at its end)"


def weights_problem(folder: Path) -> str | None:
    """The weights file of `folder` that transformers would read and fail on (cut short, not its
    format, a shard its index names missing), named with what is wrong and the fix; None when the
    files it reads are whole. Reads headers only."""
    again = (
        "a download or copy that did not finish: download or copy the model again (or save it again "
        "with save_pretrained)"
    )
    present = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not present:
        return None  # missing_files says so
    index = folder / "model.safetensors.index.json"
    if present[0] == index.name:
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            return f"{index}: not an index of safetensors shards ({type(error).__name__}: {error}); {again}"
        files = [folder / shard for shard in shards]
        for shard in files:
            if not shard.is_file():
                return f"{shard}: missing ({index.name} names it); {again}"
    else:
        files = [folder / present[0]]
    for path in files:
        reader = _safetensors_problem if path.suffix == ".safetensors" else _torch_file_problem
        why = reader(path)
        if why:
            return f"{path}: {why}: {again}"
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


class HubAnswer(NamedTuple):
    """What the hub said about a model: `problem`, why it cannot be fetched (None: it can), and
    `reached`, whether the hub answered at all (False: this machine is offline)."""

    problem: str | None
    reached: bool


def ask_hub(name: str) -> HubAnswer:
    """Whether hub model `name` can be fetched from here: one request, at most HUB_TIMEOUT_S, no
    retries (huggingface_hub's downloads retry for about 40 s without network); at once when
    HF_HUB_OFFLINE is set."""
    if offline_asked():
        return HubAnswer("HF_HUB_OFFLINE is set", reached=False)
    # huggingface_hub comes with datasets; only a hub name needs it
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT_S)
    except RepositoryNotFoundError:
        return HubAnswer(
            f"the Hugging Face hub has no model {name} (a private one needs `hf auth login`)", reached=True
        )
    except Exception as error:  # no network, a proxy, the hub down: all the same to the user
        said = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return HubAnswer(
            f"the Hugging Face hub cannot be reached from this machine ({type(error).__name__}: {said})",
            reached=False,
        )
    return HubAnswer(None, reached=True)


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
