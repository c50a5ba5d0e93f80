"""Samples text from a Hugging Face GPT-2 folder, in the engine's Python (torch, transformers):
`python sample_hf.py REQUEST.json`. The request, written by zerolab/evaluate/generate.py, names the
model folder, the prompt and the sampling settings; the texts go to request["result"] as JSON. It
imports torch and transformers only (not zerolab)."""

from __future__ import annotations

import json
import sys

import torch
import transformers
from transformers import AutoTokenizer, GPT2LMHeadModel, set_seed


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    set_seed(request["seed"])
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        model = GPT2LMHeadModel.from_pretrained(request["model"], dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(request["model"])
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(
            f"zerolab generate: {request['model']}: not a GPT-2 folder here, and transformers could not "
            f"load it ({first}); give a run directory or a GPT-2 folder (zerolab export writes one)",
            file=sys.stderr,
        )
        sys.exit(2)
    prompt = tokenizer(request["prompt"], return_tensors="pt")
    room = model.config.n_positions - prompt.input_ids.shape[1]
    greedy = request["temperature"] == 0
    with torch.no_grad():
        out = model.generate(
            **prompt,
            max_new_tokens=min(request["max_new_tokens"], room),
            do_sample=not greedy,
            temperature=None if greedy else request["temperature"],
            top_k=None if greedy else request["top_k"],
            num_return_sequences=request["samples"],
            pad_token_id=tokenizer.eos_token_id,
        )
    texts = [tokenizer.decode(row[prompt.input_ids.shape[1] :], skip_special_tokens=False) for row in out]
    with open(request["result"], "w", encoding="utf-8") as result:
        json.dump({"completions": texts, "max_new_tokens": min(request["max_new_tokens"], room)}, result)


if __name__ == "__main__":
    main()
