"""The files a run reads: the prepared dataset and the tokenizer. Missing ones are a
warning for a dry run and an error for a launch."""

from __future__ import annotations

from zerolab.locations import repo_path
from zerolab.recipe.schema import Recipe


def check_inputs(recipe: Recipe) -> list[str]:
    """One message per missing input file, naming the key and how to make the file."""
    problems: list[str] = []
    data = recipe.data
    missing = [suffix for suffix in (".bin", ".idx") if not repo_path(data.path + suffix).is_file()]
    if missing:
        files = " and ".join(f"{data.path}{suffix}" for suffix in missing)
        problems.append(f"data.path: {files} not found; prepare the dataset with `{data.prepare_command}`")
    for key in ("vocab_file", "merge_file"):
        value = getattr(data, key)
        if not repo_path(value).is_file():
            problems.append(
                f"data.{key}: {value} not found; point it at the GPT-2 BPE file "
                "(bundled in zerolab/assets/gpt2/)"
            )
    return problems
