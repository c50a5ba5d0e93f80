"""The engine's own forward pass of the model it trains, before and after training
(ZEROLAB_FORWARD_PROBE=DIR): a patch of megatron.training's `train`, which `pretrain` calls once the
model and its DeepSpeed engine are set up (and any checkpoint loaded), and after which it saves the
final checkpoint of those same weights. Before training and when it is done, every rank runs the
model on the token rows of DIR/tokens.json (a list of equal-length rows: inputs, then the next
token; under pipeline parallelism micro-batch-size rows of seq_length + 1 tokens, as the engine's
batches are), in eval mode, in whatever layout the run has (ZeRO stage, offload, tensor and pipeline
parallel); one rank of the last pipeline stage writes DIR/engine_start.pt, then DIR/engine.pt
({"logits": [rows, seq, tokenizer's vocabulary], "loss": the mean next-token loss over that
vocabulary}); then the run goes on (its final save and validation). This is how an export of the
final checkpoint is proven equal to the engine that trained it, and imported weights equal to the
model they came from."""

from __future__ import annotations

import itertools
import json
import os
import types
from typing import Any

from zerolab.rank.import_hooks import launch_patch, patch_after_import

TRAINING = "megatron.training"
PROBE_ENV = "ZEROLAB_FORWARD_PROBE"
TOKENS_FILE = "tokens.json"
OUTPUT_FILE = "engine.pt"
START_FILE = "engine_start.pt"


def probe_wanted() -> bool:
    """Whether this launch asked for the forward probe (ZEROLAB_FORWARD_PROBE)."""
    directory = os.environ.get(PROBE_ENV)
    if directory and not os.path.isfile(os.path.join(directory, TOKENS_FILE)):
        raise ValueError(f"{PROBE_ENV}={directory!r}: no {TOKENS_FILE} there to run the model on")
    return bool(directory)


def _logits(model: Any, rows: Any) -> Any:
    """The model's logits for the inputs of `rows` ([rows, seq, padded vocab], gathered over
    tensor-parallel ranks) on the ranks of the last pipeline stage; None on the others."""
    # torch, megatron here, not at the top: only in the engine's environment
    import torch
    from megatron import get_args, get_tokenizer
    from megatron.core import mpu, tensor_parallel
    from megatron.utils import get_ltor_masks_and_position_ids

    engine = model[0]
    engine.eval()
    with torch.no_grad():
        if get_args().no_pipeline_parallel:
            inputs = rows[:, :-1].contiguous()
            attention_mask, _, position_ids = get_ltor_masks_and_position_ids(
                inputs, get_tokenizer().eod, False, False, False
            )
            output = engine(inputs, position_ids, attention_mask)
            logits = output[0] if isinstance(output, tuple) else output
        else:  # DeepSpeed's pipeline engine reads batches as the engine's data loader gives them;
            # its last stage keeps the last micro batch's output
            _, logits = engine.eval_batch(itertools.repeat({"text": rows}), return_logits=True)
            if not mpu.is_pipeline_last_stage():
                return None
            logits = logits.transpose(0, 1)  # its LM head keeps Megatron's [seq, rows, vocab]
        return tensor_parallel.gather_from_tensor_model_parallel_region(logits).float()


def _write_probe(model: Any, name: str) -> None:
    """Run the model on DIR/tokens.json and write DIR/`name` (one rank of the last stage)."""
    # torch, megatron here, not at the top: only in the engine's environment
    import torch
    from megatron import get_tokenizer
    from megatron.core import mpu

    directory = os.environ[PROBE_ENV]
    with open(os.path.join(directory, TOKENS_FILE)) as tokens:
        rows = torch.tensor(json.load(tokens), dtype=torch.long)
    if torch.cuda.is_available():
        rows = rows.cuda()
    logits = _logits(model, rows)
    writer = mpu.get_tensor_model_parallel_rank() == 0 and mpu.get_data_parallel_rank() == 0
    if logits is not None and writer:
        vocabulary = logits[..., : get_tokenizer().vocab_size]  # the padding is never a target
        loss = torch.nn.functional.cross_entropy(vocabulary.flatten(0, 1), rows[:, 1:].flatten())
        torch.save({"logits": vocabulary.cpu(), "loss": float(loss)}, os.path.join(directory, name))
        print(f"zerolab: forward probe: loss {float(loss):.6f} written to {directory}/{name}", flush=True)
    torch.distributed.barrier()


def _probe_after_training(module: types.ModuleType) -> None:
    original = module.train  # type: ignore[attr-defined]

    def probe_around_training(forward_step_func: Any, model: Any, *rest: Any, **options: Any) -> int:
        _write_probe(model, START_FILE)
        for chunk in model:
            chunk.train()
        iteration = original(forward_step_func, model, *rest, **options)
        _write_probe(model, OUTPUT_FILE)
        for chunk in model:
            chunk.train()
        return iteration

    probe_around_training.__wrapped__ = original  # type: ignore[attr-defined]
    module.train = probe_around_training  # type: ignore[attr-defined]


def forward_probe() -> None:
    """The engine's forward pass of the model, before and after training (ZEROLAB_FORWARD_PROBE)."""
    patch_after_import(TRAINING, _probe_after_training)


FORWARD_PROBE = launch_patch(forward_probe, probe_wanted, kind="patch")
