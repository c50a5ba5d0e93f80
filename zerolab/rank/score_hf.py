"""Scores a Hugging Face GPT-2 folder on zerolab's evaluation tasks, in the engine's Python (torch,
transformers): `python score_hf.py REQUEST.json`. The request, written by zerolab/evaluate/run.py,
names the model folder, each task's inputs and the file the result goes to. It imports torch,
transformers and tqdm only (not zerolab), as rank/hf_gpt2.py does.

- token windows (`val`): rows of seq_length + 1 token ids; the mean loss of predicting each row's
  last seq_length tokens from those before, over every row.
- strided text (`wikitext`): the text tokenized whole, scored in windows of the model's context
  length moved by `stride` tokens; each token is predicted once, from up to a full window of the
  tokens before it (the sliding-window perplexity of the fine-tuning literature).
- choices (`hellaswag`): for each task the log-likelihood of each ending (" " + ending) after its
  context, the accuracies from them by `choice_metrics` (score_lm_eval.py gets the same from
  lm-evaluation-harness's log-likelihoods)."""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Iterator

from zerolab.rank.collector import collector_paused

with collector_paused():
    import torch
    import torch.nn.functional as F
    import transformers
    from tqdm import tqdm
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from zerolab.rank.prompt_exit import exit_now

BATCH = 8


def _windows_loss(model, rows: list[list[int]]) -> dict:
    total, count = 0.0, 0
    for start in tqdm(range(0, len(rows), BATCH), desc="val windows", unit="batch", file=sys.stderr):
        batch = torch.tensor(rows[start : start + BATCH])
        with torch.no_grad():
            logits = model(batch[:, :-1]).logits
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        count += batch[:, 1:].numel()
    return _loss_metrics(total, count, len(rows))


def _strided(model, tokenizer, text: str, stride: int) -> dict:
    ids = tokenizer(text, return_tensors="pt").input_ids[0]
    window = model.config.n_positions
    stride = stride or window // 2
    if stride > window:
        print(
            f"zerolab eval: --stride {stride} is longer than the model's context ({window} tokens); "
            f"give at most {window}",
            file=sys.stderr,
        )
        sys.exit(2)
    pieces = _strided_pieces(len(ids), window, stride)
    total, count = 0.0, 0
    with tqdm(total=len(pieces), desc="wikitext windows", unit="window", file=sys.stderr) as bar:
        for batch in _alike_batches(pieces):
            begin, end, first = batch[0]
            rows = torch.stack([ids[b:e] for b, e, _ in batch])
            with torch.no_grad():  # the logits of the positions scored only (the LM head is most of it)
                logits = model(rows, logits_to_keep=end - begin - first).logits[:, :-1]
            targets = rows[:, first + 1 :]
            total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
            count += targets.numel()
            bar.update(len(batch))
    return _loss_metrics(total, count, len(pieces))


def _strided_pieces(length: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """The windows (begin, end, first) over `length` tokens: position p of a window predicts token
    begin+p+1; the positions from `first` on are scored, those of the tokens no window before scored."""
    pieces, scored_until = [], 1
    for begin in range(0, max(length - 1, 1), stride):
        end = min(begin + window, length)
        if end <= scored_until:
            break
        pieces.append((begin, end, scored_until - begin - 1))
        scored_until = end
        if end == length:
            break
    return pieces


def _alike_batches(pieces: list[tuple[int, int, int]]) -> Iterator[list[tuple[int, int, int]]]:
    """Consecutive windows of the same length and first scored position, BATCH at most at a time."""
    for _, alike in itertools.groupby(pieces, key=lambda piece: (piece[1] - piece[0], piece[2])):
        alike = list(alike)
        for start in range(0, len(alike), BATCH):
            yield alike[start : start + BATCH]


def _loss_metrics(total: float, count: int, examples: int) -> dict:
    loss = total / count
    return {"metrics": {"loss": loss, "ppl": math.exp(loss)}, "examples": examples, "tokens": count}


def _choices(model, tokenizer, docs: list[dict]) -> dict:
    window = model.config.n_positions
    eos = tokenizer.eos_token_id
    answers = []
    for doc in tqdm(docs, desc="hellaswag tasks", unit="task", file=sys.stderr):
        context = tokenizer(doc["context"]).input_ids
        endings = [tokenizer(" " + ending).input_ids for ending in doc["endings"]]
        rows = [(context + ending)[-window:] for ending in endings]
        width = max(len(row) for row in rows)
        batch = torch.tensor([row + [eos] * (width - len(row)) for row in rows])
        first = min(len(row) - len(ending) - 1 for row, ending in zip(rows, endings, strict=True))
        with torch.no_grad():  # the logits from the first ending's position on only
            logits = model(batch, logits_to_keep=width - first).logits
        scores = []
        for k, (row, ending) in enumerate(zip(rows, endings, strict=True)):
            n = len(ending)
            predicting = F.log_softmax(
                logits[k, len(row) - n - 1 - first : len(row) - 1 - first].float(), dim=-1
            )
            scores.append(predicting.gather(1, torch.tensor(row[-n:])[:, None]).sum().item())
        answers.append(
            {
                "loglikelihoods": scores,
                "tokens": [len(ending) for ending in endings],
                "characters": [len(ending) for ending in doc["endings"]],
                "label": doc["label"],
            }
        )
    return {"metrics": choice_metrics(answers), "examples": len(docs)}


def choice_metrics(answers: list[dict]) -> dict:
    """HellaSwag's accuracies from each task's endings (`loglikelihoods`, `tokens`, `characters`,
    the gold `label`): `acc`, the highest sum is gold; `acc_norm`, the highest mean per token (the
    GPT-2 reproduction's); `acc_norm_chars`, the highest per character (lm-evaluation-harness's
    acc_norm)."""

    def right(norms: str | None) -> float:
        hits = 0
        for answer in answers:
            sums = answer["loglikelihoods"]
            scores = [s / n for s, n in zip(sums, answer[norms], strict=True)] if norms else sums
            hits += max(range(len(scores)), key=scores.__getitem__) == answer["label"]
        return hits / len(answers)

    return {"acc": right(None), "acc_norm": right("tokens"), "acc_norm_chars": right("characters")}


class UnloadableModel(Exception):
    """A model transformers cannot load whole: the message names it, what is wrong and the fix."""


SHOWN = 4
"""Tensor names shown of a list; the rest are counted."""


def _tensors(names: list[str], what: str) -> str:
    """`N tensors WHAT (a, b, c, d, and N-4 more)`."""
    shown = ", ".join(names[:SHOWN]) + (f", and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return f"{len(names)} {'tensor' if len(names) == 1 else 'tensors'} {what} ({shown})"


def _first_line(error: Exception) -> str:
    said = str(error).strip()
    return f"{type(error).__name__}: {said.splitlines()[0]}" if said else type(error).__name__


def not_covered(source: str, loading: dict) -> str | None:
    """What transformers' loading info says does not fit: tensors the model of config.json has and
    the weights lack (they would keep their random initial values), tensors the weights hold that it
    has no place for, tensors of another shape; None when the weights are the model's, tensor for
    tensor."""
    mismatched = [
        f"{name} {list(held)}, not {list(wanted)}" for name, held, wanted in loading["mismatched_keys"]
    ]
    found = [
        _tensors(sorted(names), what)
        for names, what in (
            (loading["missing_keys"], "missing, which the model would keep at random initial values"),
            (loading["unexpected_keys"], "the model has no place for"),
            (mismatched, "of another shape than config.json's"),
        )
        if names
    ]
    if not found:
        return None
    return (
        f"{source}: its weights do not match the model its config.json describes: {'; '.join(found)}; "
        "config.json and the weights are of different models, or a weights file is incomplete: download "
        "or save the model again (save_pretrained writes both)"
    )


def gpt2_model(source: str) -> GPT2LMHeadModel:
    """The fp32 GPT2LMHeadModel of `source` (a folder or a hub name), every tensor of it from the
    weights files; UnloadableModel when transformers cannot read them or they do not cover the model
    config.json describes (transformers would keep the rest at their random initial values)."""
    transformers.logging.set_verbosity_error()  # its notes (a long text's length) are not the user's concern
    transformers.logging.disable_progress_bar()
    load = {"dtype": torch.float32, "output_loading_info": True}
    try:
        model, loading = GPT2LMHeadModel.from_pretrained(source, **load)
    except (OSError, ValueError) as error:
        raise UnloadableModel(
            f"{source}: transformers cannot load it as GPT2LMHeadModel ({_first_line(error)}); give a "
            "GPT-2 folder (one zerolab export or save_pretrained wrote) or a hub name this machine can fetch"
        ) from None
    except Exception as error:  # the safetensors library's own errors among them
        if "ignore_mismatched_sizes" in str(error):  # a tensor of another shape: load again to learn which
            _, loading = GPT2LMHeadModel.from_pretrained(source, **load, ignore_mismatched_sizes=True)
            if not_covered(source, loading):
                raise UnloadableModel(not_covered(source, loading)) from None
        raise UnloadableModel(
            f"{source}: its weights cannot be read ({_first_line(error)}): a file cut short or damaged, as "
            "a download that did not finish leaves it; download or copy the model again"
        ) from None
    problem = not_covered(source, loading)
    if problem:
        raise UnloadableModel(problem)
    return model.eval()


def load_gpt2(source: str, command: str):
    """The fp32 GPT2LMHeadModel and tokenizer of `source` (a folder or a hub name), transformers'
    notes and bars silenced; exit 2 with a `zerolab COMMAND:` line when it cannot load."""
    try:
        model = gpt2_model(source)
        return model, AutoTokenizer.from_pretrained(source)
    except UnloadableModel as error:
        print(f"zerolab {command}: {error}", file=sys.stderr)
    except (OSError, ValueError) as error:
        print(
            f"zerolab {command}: {source}: no tokenizer transformers can load ({_first_line(error)}); save "
            "the model's tokenizer beside it (AutoTokenizer.from_pretrained(NAME).save_pretrained(DIR))",
            file=sys.stderr,
        )
    sys.exit(2)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    model, tokenizer = load_gpt2(request["model"], "eval")
    results = {}
    for task, inputs in request["tasks"].items():
        if "rows" in inputs:
            results[task] = _windows_loss(model, inputs["rows"])
        elif "text" in inputs:
            results[task] = _strided(model, tokenizer, inputs["text"], inputs["stride"])
        else:
            results[task] = _choices(model, tokenizer, inputs["docs"])
    with open(request["result"], "w", encoding="utf-8") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
    exit_now(0)
