"""`zerolab generate`: sample text from a model (transformers' generate, in the engine's Python:
rank/sample_hf.py)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zerolab.contracts import rank_script
from zerolab.engine.scripts import run_engine_script
from zerolab.evaluate.target import Model, hf_model

SAMPLER = rank_script("sample_hf")


@dataclass(frozen=True)
class Sampling:
    """How to sample: temperature 0 is greedy (top-k then does not apply)."""

    max_new_tokens: int = 50
    temperature: float = 0.8
    top_k: int = 50
    seed: int = 0
    samples: int = 1


def generate(
    target: str, prompt: str, sampling: Sampling, iteration: int | None = None
) -> tuple[Model, list[str], int]:
    """The model TARGET names, its completions of `prompt` and the new tokens each was allowed
    (fewer than asked where the prompt fills the context)."""
    with hf_model(target, iteration) as model, tempfile.TemporaryDirectory(prefix="zerolab-sample-") as work:
        result_file = Path(work) / "result.json"
        request = {
            "model": model.source,
            "prompt": prompt,
            "max_new_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "seed": sampling.seed,
            "samples": sampling.samples,
            "result": str(result_file),
        }
        run_engine_script(SAMPLER, request, Path(work), name="generate")
        output = json.loads(result_file.read_text())
    return model, output["completions"], output["max_new_tokens"]
