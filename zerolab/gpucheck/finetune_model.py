"""The GPU check's model to fine-tune: a GPT-2 of the shipped GPT-2 XL fine-tuning recipes' shape
(recipes/finetune/gpt2_xl_mrpc_*.yaml; overrides change it) with random weights, as the check's
machine cannot download OpenAI's; memory and speed do not depend on the weights. The shape is the
recipe's; the engine's Python writes the model (zerolab.rank.random_gpt2).
`python -m zerolab.gpucheck.finetune_model OUT [KEY=VALUE ...]`."""

from __future__ import annotations

import subprocess
import sys

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.contracts import RANDOM_GPT2_MODULE
from zerolab.engine.paths import engine_python, engine_python_env, zerolab_on_path
from zerolab.gpucheck.check import FINETUNE_RECIPE
from zerolab.recipe.compose import load_recipe


def main(argv: list[str] | None = None) -> int:
    """Write the model into OUT (argv[0]), the recipe's shape after the overrides that follow."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.exit("usage: python -m zerolab.gpucheck.finetune_model OUT [KEY=VALUE ...]")
    model = load_recipe(FINETUNE_RECIPE, args[1:]).model
    shape = {
        "--layers": model.num_layers,
        "--hidden": model.hidden_size,
        "--heads": model.num_attention_heads,
        "--positions": model.max_position_embeddings,
    }
    command = [str(engine_python()), "-m", RANDOM_GPT2_MODULE, "--out", args[0]]
    command += ["--tokenizer", str(GPT2_VOCAB), str(GPT2_MERGES)]
    command += [str(word) for pair in shape.items() for word in pair]
    return subprocess.run(command, env=engine_python_env() | zerolab_on_path(), check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
