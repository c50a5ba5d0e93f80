"""Samples text from a Hugging Face GPT-2 folder, in the engine's Python (torch, transformers):
`python sample_hf.py REQUEST.json`. The request, written by zerolab/evaluate/generate.py, names the
model folder, the prompt and the sampling settings; the texts go to request["result"] as JSON. It
imports torch, transformers and its neighbour score_hf.py only (not zerolab)."""

from __future__ import annotations

import json
import sys

from zerolab.rank.collector import collector_paused

with collector_paused():
    import torch
    from score_hf import load_gpt2  # its neighbour: the script's folder is on the path
    from transformers import set_seed

    from zerolab.rank.prompt_exit import exit_now


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    set_seed(request["seed"])
    model, tokenizer = load_gpt2(request["model"], "generate")
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
    exit_now(0)
