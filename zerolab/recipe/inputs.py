"""The files a pretraining reads: the prepared dataset, the tokenizer and imported weights.
Relative paths are relative to the current directory, where runs start (zerolab.locations); a
tokenizer file left null is the GPT-2 file bundled with zerolab. Missing files are a warning for
a dry run and an error for a launch (zerolab.recipe.job's check_inputs, for either job kind)."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.data_prep.indexed import dataset_problems, read_index
from zerolab.data_prep.pipeline import SUFFIX, manifest_source, manifest_tokenizer_facts
from zerolab.data_prep.tokenizer import (
    GPT2_BPE,
    HF,
    MEGATRON_SENTENCEPIECE,
    MODEL_TOKENIZERS,
    VOCAB_SIZE,
    Tokenizer,
    model_digests,
    model_problem,
)
from zerolab.imported import import_hint, layout_tag, read_manifest, tokenizer_digest
from zerolab.locations import display_path
from zerolab.recipe.schema import MODEL_SHAPE_KEYS, Recipe
from zerolab.rundir import LATEST_CHECKPOINT

BUNDLED_TOKENIZER_FILES = {"vocab_file": GPT2_VOCAB, "merge_file": GPT2_MERGES}
"""What data.vocab_file and data.merge_file mean when null."""

TOKENIZER_FILE_FIX = {
    "vocab_file": "point it at the GPT-2 BPE file, or remove it (null: the file bundled with zerolab)",
    "merge_file": "point it at the GPT-2 BPE file, or remove it (null: the file bundled with zerolab)",
    "tokenizer_model": "point it at the SentencePiece model (tokenizer.model) or the Hugging Face tokenizer "
    "folder the dataset was prepared with",
}
"""How to mend each tokenizer file key whose file is missing."""


def tokenizer_file(recipe: Recipe, key: str) -> str:
    """`data.vocab_file` or `data.merge_file` as the engine gets it: as given, or the bundled
    file (relative to the current directory when inside it)."""
    value = getattr(recipe.data, key)
    return value if value is not None else display_path(BUNDLED_TOKENIZER_FILES[key])


def tokenizer_files(recipe: Recipe) -> dict[str, str]:
    """The tokenizer files the engine reads, by data key: GPT-2's vocab.json and merges.txt (the
    bundled ones where null), or the model of GPTSentencePieceTokenizer or HFTokenizer (none while
    null: a check refuses)."""
    data = recipe.data
    if data.tokenizer_type in MODEL_TOKENIZERS:
        return {} if data.tokenizer_model is None else {"tokenizer_model": data.tokenizer_model}
    return {key: tokenizer_file(recipe, key) for key in BUNDLED_TOKENIZER_FILES}


def vocabulary_size(recipe: Recipe) -> tuple[int, str, str] | None:
    """The tokenizer's vocabulary before Megatron pads it, what was counted, and the data key of its
    file: the entries of the configured vocab file when it exists, else GPT-2's; the pieces of the
    SentencePiece model or of the Hugging Face folder, None where it is not there to count (the
    launch refuses it missing). ValueError when the file is not a vocab.json, a SentencePiece model or
    a Hugging Face folder."""
    if recipe.data.tokenizer_type in MODEL_TOKENIZERS:
        model = recipe.data.tokenizer_model
        if model is None or not Path(model).exists():
            return None
        if problem := model_problem(Path(model)):
            raise ValueError(problem)
        return recipe_tokenizer(recipe).vocab_size, model, "tokenizer_model"
    path = Path(tokenizer_file(recipe, "vocab_file"))
    if path.is_file():
        stat = path.stat()
        return _vocab_entries(path.resolve(), stat.st_mtime_ns, stat.st_size), str(path), "vocab_file"
    return VOCAB_SIZE, recipe.data.tokenizer_type, "vocab_file"


@functools.lru_cache(maxsize=8)
def _vocab_entries(path: Path, mtime_ns: int, size: int) -> int:
    """Entries of a vocab.json (cached while the file is unchanged)."""
    try:
        vocab = json.loads(path.read_bytes())
    except (OSError, ValueError):
        vocab = None
    if not isinstance(vocab, dict):
        raise ValueError(f"{display_path(path)} is not a vocab.json (a JSON object of token: id)")
    return len(vocab)


DATASET_KEYS = ("path", "train_path", "valid_path", "test_path")
"""The data keys that name a prepared dataset (PREFIX of PREFIX.bin and PREFIX.idx)."""


def blend(value: str) -> list[tuple[str, str]] | None:
    """A data path as Megatron reads it: None for one prefix (which may hold spaces), or the
    (weight, prefix) pairs of a weighted blend `W1 PREFIX1 W2 PREFIX2 ...`: words of which the first
    is a number (the checks refuse a blend whose words do not pair into a number and a prefix:
    blend_problem)."""
    words = value.split()
    if len(words) < 2 or not _number(words[0]):
        return None
    return list(zip(words[::2], words[1::2], strict=False))


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def blend_problem(value: str) -> str | None:
    """What is wrong with a blend's words, or None: pairs of a positive number and a prefix."""
    words = value.split()
    if len(words) % 2:
        return f"{len(words)} words: a blend is pairs of a weight and a dataset prefix"
    for weight, prefix in zip(words[::2], words[1::2], strict=True):
        try:
            number = float(weight)
        except ValueError:
            return f"{weight!r} before {prefix!r} is not a weight (a number)"
        if not number > 0:
            return f"the weight {weight} of {prefix!r} is not above 0"
    return None


def dataset_paths(recipe: Recipe) -> dict[str, str]:
    """The prepared datasets the recipe reads, by data key; each prefix of a blend by its key and
    its place in the blend (`path[2]`: the second)."""
    paths: dict[str, str] = {}
    for key in DATASET_KEYS:
        value = getattr(recipe.data, key)
        if value is None:
            continue
        pairs = blend(value)
        if pairs is None:
            paths[key] = value
        else:
            paths |= {f"{key}[{number}]": prefix for number, (_, prefix) in enumerate(pairs, start=1)}
    return paths


def _dataset_key(key: str) -> str:
    """The data key of a dataset_paths label (`path[2]`: `path`)."""
    return key.split("[", 1)[0]


def _dataset_path(recipe: Recipe, key: str) -> str:
    """The prefix a dataset_paths label names."""
    return dataset_paths(recipe)[key] if "[" in key else getattr(recipe.data, key)


def _own_dataset(recipe: Recipe, key: str) -> bool:
    """Whether data.prepare_command writes the dataset of data.`key`."""
    data = recipe.data
    path = _dataset_path(recipe, key)
    words = shlex.split(data.prepare_command)
    out = words[words.index("--out") + 1] if "--out" in words[:-1] else None
    split = next((name for name in ("train", "valid", "test") if path.endswith(f"_{name}{SUFFIX}")), None)
    written = [f"{out}{SUFFIX}", *([f"{out}_{split}{SUFFIX}"] if split else [])] if out else []
    return path in written


def prepare_hint(recipe: Recipe, key: str) -> str:
    """How to make the dataset of data.`key`: data.prepare_command when that writes it, else
    `zerolab prep` with the output prefix that writes it."""
    data = recipe.data
    path = _dataset_path(recipe, key)
    split = next((name for name in ("train", "valid", "test") if path.endswith(f"_{name}{SUFFIX}")), None)
    if _own_dataset(recipe, key):
        return f"prepare the dataset with `{data.prepare_command}`"
    option = tokenizer_option(recipe)
    if "[" in key:
        return (
            f"prepare it with `zerolab prep CORPUS --out {path.removesuffix(SUFFIX)}{option}` (`zerolab prep "
            f"--help`), or correct the blend's prefix in data.{_dataset_key(key)}"
        )
    if key != "path" and split is not None:
        prefix = path.removesuffix(f"_{split}{SUFFIX}")
        return (
            f"prepare it with `zerolab prep CORPUS --out {prefix} --split TRAIN,VALID,TEST{option}` "
            f"(CORPUS: dolly, openwebtext, jsonl or text), or `zerolab prep wikitext --out {prefix}{option}` "
            "(WikiText comes split; `zerolab prep --help`)"
        )
    if path.endswith(SUFFIX):
        return (
            f"prepare it with `zerolab prep CORPUS --out {path.removesuffix(SUFFIX)}{option}` (CORPUS: "
            f"dolly, openwebtext, jsonl or text; `zerolab prep --help`), or point data.{key} at a prepared "
            "dataset"
        )
    return (
        f"point data.{key} at a prepared dataset: the PREFIX of PREFIX.bin and PREFIX.idx "
        f"(`zerolab prep CORPUS --out OUT{option}` writes OUT{SUFFIX})"
    )


def recipe_tokenizer(recipe: Recipe) -> Tokenizer:
    """The tokenizer whose ids the recipe's dataset must hold (its model as data.tokenizer_model names it)."""
    data = recipe.data
    if data.tokenizer_type not in MODEL_TOKENIZERS or data.tokenizer_model is None:
        return Tokenizer()
    return Tokenizer(
        Path(data.tokenizer_model), megatron_specials=data.tokenizer_type == MEGATRON_SENTENCEPIECE
    )


def tokenizer_option(recipe: Recipe) -> str:
    """The `zerolab prep` options that write the recipe's tokenizer's ids: ` --tokenizer-model MODEL`
    for a SentencePiece model or a Hugging Face folder (and ` --tokenizer-type SentencePieceTokenizer`
    for Megatron's special tokens), nothing for GPT-2's BPE."""
    data = recipe.data
    if data.tokenizer_type not in MODEL_TOKENIZERS or not data.tokenizer_model:
        return ""
    kind = (
        f" --tokenizer-type {MEGATRON_SENTENCEPIECE}" if data.tokenizer_type == MEGATRON_SENTENCEPIECE else ""
    )
    return f" --tokenizer-model {data.tokenizer_model}{kind}"


def damaged_hint(recipe: Recipe, key: str) -> str:
    """How to make again the damaged dataset of data.`key`, over the damaged files (--force)."""
    data = recipe.data
    path = _dataset_path(recipe, key)
    if _own_dataset(recipe, key):
        return f"prepare it again with `{data.prepare_command} --force`"
    made = manifest_source(path)
    if made:
        return (
            f"prepare it again as it was made ({made}), with --force, or point data.{key} at an intact "
            "dataset"
        )
    out = path.removesuffix(SUFFIX) if path.endswith(SUFFIX) else "OUT"
    return (
        f"prepare it again with `zerolab prep CORPUS --out {out} --force` (CORPUS: dolly, openwebtext, "
        f"jsonl or text), or point data.{key} at an intact dataset"
    )


def dataset_damage(recipe: Recipe) -> list[str]:
    """One message per prepared dataset of the recipe whose .bin and .idx are damaged or disagree (a
    truncated or corrupt .idx, a .bin shorter than its index says), as `zerolab prep inspect` finds
    them; from the .idx and the size of the .bin, not reading the .bin."""
    problems = []
    for key, path in dataset_paths(recipe).items():
        _, damage = dataset_problems(Path(path))
        if damage:
            problems.append(
                f"data.{key}: {path} is damaged or cut short: {'; '.join(damage)}. The engine cannot read "
                f"it; {damaged_hint(recipe, key)} (`zerolab prep inspect {path}` checks it)"
            )
    return problems


def pretraining_inputs_problems(recipe: Recipe) -> list[str]:
    """The missing or mismatched dataset, tokenizer and imported weights of a pretraining recipe."""
    problems: list[str] = []
    for key, path in dataset_paths(recipe).items():
        missing = [suffix for suffix in (".bin", ".idx") if not Path(path + suffix).is_file()]
        if missing:
            files = " and ".join(f"{path}{suffix}" for suffix in missing)
            problems.append(f"data.{key}: {files} not found; {prepare_hint(recipe, key)}")
    if not problems:
        problems += dataset_damage(recipe)
    if not problems:
        problems += size_problems(recipe)
    for key, value in tokenizer_files(recipe).items():
        folder = recipe.data.tokenizer_type == HF and key == "tokenizer_model"
        if not (Path(value).is_dir() if folder else Path(value).is_file()):
            problems.append(f"data.{key}: {value} not found; {TOKENIZER_FILE_FIX[key]}")
    problems += tokenizer_mismatches(recipe)
    if recipe.model.init_from is not None:
        problems += init_problems(recipe)
    teacher = recipe.distillation.teacher
    if (
        recipe.distillation.enabled
        and teacher is not None
        and not (Path(teacher) / LATEST_CHECKPOINT).is_file()
    ):
        problems.append(
            f"distillation.teacher: {teacher} holds no checkpoint ({LATEST_CHECKPOINT}): the engine "
            "would distil from a random teacher; point it at a trained run's checkpoints/ folder"
        )
    return problems


def tokenizer_mismatches(recipe: Recipe) -> list[str]:
    """One message per prepared dataset whose manifest names another tokenizer than the recipe's: its
    ids would be other words (or past the vocabulary). A dataset without a readable manifest (one of
    Megatron's own preprocess_data.py) is taken as it is."""
    data = recipe.data
    model = Path(data.tokenizer_model) if data.tokenizer_model else None
    digests = (
        model_digests(model) if data.tokenizer_type in MODEL_TOKENIZERS and model and model.exists() else None
    )
    option = tokenizer_option(recipe)
    problems = []
    for key, path in dataset_paths(recipe).items():
        facts = manifest_tokenizer_facts(path)
        if facts is None:
            continue
        made_with = facts.get("type", GPT2_BPE)
        files = facts.get("files") if isinstance(facts.get("files"), dict) else {}
        if made_with == data.tokenizer_type and (digests is None or digests == files):
            continue
        named = made_with + (f" ({', '.join(files)})" if made_with in MODEL_TOKENIZERS else "")
        problems.append(
            f"data.{key}: {path} was tokenized with {named} (its manifest), the recipe trains with "
            f"data.tokenizer_type {data.tokenizer_type}"
            + (f" and data.tokenizer_model {data.tokenizer_model}" if option else "")
            + ": its ids would be other words; prepare it with the recipe's tokenizer (`zerolab prep CORPUS "
            f"--out {path.removesuffix(SUFFIX)}{option} --force`), or set data.tokenizer_type"
            + (" and data.tokenizer_model" if made_with in MODEL_TOKENIZERS else "")
            + " to the dataset's"
        )
    return problems


def init_problems(recipe: Recipe) -> list[str]:
    """What keeps the run from starting from the weights of model.init_from: no folder of `zerolab
    import` there, no checkpoint of the recipe's layout, another shape, padded vocabulary or tokenizer."""
    folder = recipe.model.init_from
    assert folder is not None
    try:
        weights = read_manifest(Path(folder))
    except ValueError as error:
        return [f"model.init_from: {error}; {import_hint(Path(folder), recipe.model.import_command)}"]
    tensor, pipeline = recipe.parallel.tensor, recipe.parallel.pipeline
    layout = weights.layout(tensor, pipeline)
    if layout is None:
        return [
            f"model.init_from: {folder} holds the layouts {', '.join(weights.layouts)}, not "
            f"{layout_tag(tensor, pipeline)} (parallel.tensor={tensor}, parallel.pipeline={pipeline}); "
            f"import it: `zerolab import {weights.source} --out NEW_DIR --parallel {tensor}x{pipeline}` (one "
            "--parallel per layout a sweep needs) and set model.init_from=NEW_DIR"
        ]
    problems = [
        f"model.{key}={getattr(recipe.model, key)}: the weights in {folder} have {key} "
        f"{getattr(weights.shape, key)}; set model.{key}={getattr(weights.shape, key)}, or model.init_from "
        "to weights of that shape (null: random weights)"
        for key in MODEL_SHAPE_KEYS
        if getattr(recipe.model, key) != getattr(weights.shape, key)
    ]
    if not problems and recipe.padded_vocab_size != layout.padded_vocab_size:
        problems.append(
            f"model.make_vocab_size_divisible_by={recipe.model.make_vocab_size_divisible_by}: pads the "
            f"vocabulary to {recipe.padded_vocab_size} rows, the weights in {folder} to "
            f"{layout.padded_vocab_size}; set model.make_vocab_size_divisible_by="
            f"{weights.make_vocab_size_divisible_by}"
        )
    if recipe.data.tokenizer_type in MODEL_TOKENIZERS:
        problems.append(
            f"model.init_from: the weights in {folder} learned GPT-2's BPE ids, and data.tokenizer_type "
            f"{recipe.data.tokenizer_type} gives others; set data.tokenizer_type=GPT2BPETokenizer (with a "
            "dataset prepared without --tokenizer-model), or model.init_from=null (random weights)"
        )
        return problems
    vocab, merges = (Path(tokenizer_file(recipe, key)) for key in BUNDLED_TOKENIZER_FILES)
    if vocab.is_file() and merges.is_file():
        try:
            same = tokenizer_digest(vocab, merges) == weights.tokenizer_sha256
        except ValueError:
            same = True  # the engine's tokenizer says what is wrong with those files
        if not same:
            problems.append(
                f"data.vocab_file, data.merge_file: {vocab} and {merges} are not the tokenizer the weights "
                f"in {folder} belong to; set data.vocab_file={Path(folder) / 'vocab.json'} "
                f"data.merge_file={Path(folder) / 'merges.txt'}"
            )
    return problems


def size_problems(recipe: Recipe) -> list[str]:
    """A dataset smaller than data.min_documents (counted in the .idx files the recipe reads), with
    what it was made from and the command that makes the right one."""
    wanted = recipe.data.min_documents
    if wanted is None:
        return []
    counts = {}
    for path in dataset_paths(recipe).values():
        try:
            counts[path] = len(read_index(Path(f"{path}.idx")))
        except (OSError, ValueError):
            return []  # unreadable: the engine's own error says more than a count could
    held = sum(counts.values())
    if held >= wanted:
        return []
    key = "path" if recipe.data.path is not None else "train_path"
    origins = [
        origin if len(counts) == 1 else f"{path}: {origin}"
        for path in counts
        if (origin := manifest_source(path))
    ]
    made = f" (made by {'; '.join(origins)})" if origins else ""
    return [
        f"data.{key}: {', '.join(counts)} holds {held:,} documents, fewer than data.min_documents "
        f"({wanted:,}) for {recipe.data.name}{made}: not the dataset this recipe is for. Prepare it with "
        f"`{recipe.data.prepare_command} --force`, point data.{key} at it, or set data.min_documents=null "
        "to train on this one anyway"
    ]
