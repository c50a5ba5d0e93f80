"""A Hugging Face GPT-2 as the engine's checkpoints, one per parallel layout, for a run that starts
from those weights (`--load DIR --load-tag TAG --finetune`: DeepSpeed loads the model files only).
The weight mapping is hf_gpt2's, used in reverse.

Run by the engine's Python: `python hf_to_engine.py REQUEST.json`. The request names the Hugging
Face directory (`model`), its layer count and vocabulary, the folder to write (`out`) and the
layouts (`layouts`: [folder name, tensor, pipeline, padded vocabulary] each; the names are
zerolab.imported's tags). A layout holds what the pinned engine itself saves: without pipeline
parallelism one mp_rank_{TP}_model_states.pt per tensor-parallel rank, its `module` Megatron's
nested state; with it, one layer_{IDX}-model_{TP}-model_states.pt per layer of the pipeline (the
embedding is layer 1, transformer layer i is i + 2, the final layer norm follows) and an mp_rank
file without a module for each model-parallel rank. The tokenizer is written beside them as
vocab.json and merges.txt. The rows the padded vocabulary adds are the mean of GPT-2's rows (as
transformers' resize_token_embeddings does): a padded row's logit is then the mean of the real
logits, so by Jensen's inequality it takes at most 1/vocabulary of the probability, and the engine's
loss (over the padded vocabulary) differs from GPT-2's by at most log(1 + padded rows / vocabulary).
A model this cannot read exits with status 2 and one line naming the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from zerolab.rank.collector import collector_paused

with collector_paused():
    import torch
    from hf_gpt2 import (
        CHECKPOINT_VERSION,
        CheckpointError,
        layer_files,
        megatron_from_hf,
        nested_module,
        request_main,
        split_tensor_parallel,
    )
    from score_hf import UnloadableModel, gpt2_model  # eval's loader: refuses weights not covering the model
    from transformers import AutoTokenizer

    from zerolab.rank.prompt_exit import exit_now


def hf_weights(model_dir: str) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's weights, in fp32, as transformers loads them; CheckpointError when the files
    cannot be read or do not cover the model config.json describes, tensor for tensor."""
    try:
        model = gpt2_model(model_dir)
    except UnloadableModel as error:
        raise CheckpointError(str(error)) from None
    return {name: tensor.detach().float() for name, tensor in model.state_dict().items()}


def write_tokenizer(model_dir: str, out: Path, vocab_size: int) -> None:
    """The model's tokenizer as the engine reads it (vocab.json and merges.txt) into `out`, from
    whichever files the directory holds; it must have the model's `vocab_size` entries."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{model_dir}: no tokenizer transformers can load ({error})") from None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.model).__name__ != "BPE":
        raise CheckpointError(f"{model_dir}: its tokenizer is not a byte-level BPE (GPT-2's)")
    if len(tokenizer) != vocab_size:
        raise CheckpointError(
            f"{model_dir}: its tokenizer has {len(tokenizer)} tokens, config.json's vocab_size is "
            f"{vocab_size}: the weights and the tokenizer do not belong together"
        )
    backend.model.save(str(out))


def _model_states(module: dict[str, Any] | None, model_parallel: int) -> dict[str, Any]:
    """An mp_rank file as DeepSpeed and Megatron read it when they load the model only."""
    return {
        "module": module,
        "buffer_names": [],
        "param_shapes": None,
        "dp_world_size": 1,
        "mp_world_size": model_parallel,
        "global_steps": 0,
        "global_samples": 0,
        "skipped_steps": 0,
        "checkpoint_version": CHECKPOINT_VERSION,
        "iteration": 0,
    }


def write_layout(
    megatron: dict[str, torch.Tensor], folder: Path, tensor: int, pipeline: int, num_layers: int
) -> None:
    """One layout's checkpoint files in `folder`."""
    folder.mkdir()
    ranks = split_tensor_parallel(megatron, tensor)
    if pipeline == 1:
        for rank, flat in enumerate(ranks):
            torch.save(
                _model_states(nested_module(flat), tensor), folder / f"mp_rank_{rank:02d}_model_states.pt"
            )
        return
    for rank, flat in enumerate(ranks):
        for index, weights in layer_files(flat, num_layers).items():
            torch.save(weights, folder / f"layer_{index:02d}-model_{rank:02d}-model_states.pt")
    for rank in range(tensor * pipeline):
        torch.save(_model_states(None, tensor * pipeline), folder / f"mp_rank_{rank:02d}_model_states.pt")


def import_model(request: dict[str, Any]) -> None:
    """Write the request's layouts of its Hugging Face GPT-2 into its `out` folder."""
    write_tokenizer(request["model"], Path(request["out"]), request["vocab_size"])
    hf = hf_weights(request["model"])
    embedding = hf["transformer.wte.weight"]
    num_layers = request["num_layers"]
    for tag, tensor, pipeline, padded in request["layouts"]:
        padding = embedding.mean(dim=0, keepdim=True).expand(padded - embedding.shape[0], -1)
        megatron = megatron_from_hf(hf, padding)
        write_layout(megatron, Path(request["out"]) / tag, tensor, pipeline, num_layers)
        print(
            f"zerolab: wrote tensor parallel {tensor}, pipeline parallel {pipeline}",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    exit_now(request_main(sys.argv[1:], import_model, "import"))
