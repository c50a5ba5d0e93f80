"""The flags of Megatron-DeepSpeed's forks and older or newer versions that the pinned engine's parser
does not have, as the porter meets them in real launches (benchmarks/wild_launches.py): renamed to
the pinned engine's flag that does the same, dropped because they change nothing the run computes,
or refused naming the fork they come from, why, and the nearest thing the pinned engine has. Each
entry cites the fork's code that shows what the flag does (read at the commits named)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zerolab.errors import UserError
from zerolab.porting.from_command import groups

BIGSCIENCE = "bigscience-workshop/Megatron-DeepSpeed (BLOOM's fork, 8387ae17)"
ARGONNE = "argonne-lcf/Megatron-DeepSpeed (ALCF's fork, ffa3456d)"
HABANA = "HabanaAI/Megatron-DeepSpeed (Intel Gaudi's fork, 891d6db9)"
DEEPSPIN = "deep-spin/Megatron-DeepSpeed (4e33e780)"
VILLE = "Vmjkom/Ville_Megatron-DeepSpeed (7eb36a11)"
LIUKETT = "liukeTT/Megatron-DeepSpeed-TT (7eb904ec)"
RIVERSTONE = "riverstone496/megatron_deepspeed-lion (b13f2ac8)"
LIUKETT_TRACE = (
    f"{LIUKETT}: megatron/training.py records execution and kineto traces between these steps; profiling, "
    "not training (the pinned engine's own is --profile pt --profile_steps START,END)"
)
OKOGE = (
    "okoge-kaz/megatron-deepspeed-turing-techblog (808a93d8) and kojimano/Megatron-DeepSpeed-ABCI (a3fbb95e)"
)


@dataclass(frozen=True)
class Dropped:
    """A flag that changes nothing computed: whether it takes a value, and the code that shows it."""

    takes_value: bool
    why: str


DROPPED = {
    "--codecarbon-dir": Dropped(
        True,
        f"{BIGSCIENCE}: the folder megatron/global_vars.py's CodeCarbon tracker writes energy estimates "
        "into; nothing trained reads it",
    ),
    "--log-level": Dropped(
        True, f"{BIGSCIENCE}: megatron/initialize.py sets the Python loggers' verbosity on rank 0 with it"
    ),
    "--log-level-replica": Dropped(
        True, f"{BIGSCIENCE}: megatron/initialize.py sets the other ranks' logger verbosity with it"
    ),
    "--kill-switch-path": Dropped(
        True,
        f"{BIGSCIENCE}: megatron/training.py exits when this file appears (zerolab stops a run by its "
        "signal: `zerolab launch` forwards SIGTERM to every rank)",
    ),
    "--kill-switch-file": Dropped(
        True,
        f"{ARGONNE}: megatron/training.py exits when this file appears (BigScience's --kill-switch-path)",
    ),
    "--abort-on-unmet-fused-kernel-constraints": Dropped(
        False,
        f"{BIGSCIENCE}: megatron/initialize.py aborts at start when a fused kernel's shape constraints "
        "are not met, instead of falling back; a guard, the same computation either way",
    ),
    "--use-mpi": Dropped(
        False,
        f"{OKOGE}: megatron/arguments.py copies Open MPI's OMPI_COMM_WORLD_RANK/LOCAL_RANK/SIZE into "
        "RANK/LOCAL_RANK/WORLD_SIZE; a launcher's concern: zerolab's launch sets them",
    ),
    "--deepspeed_mpi": Dropped(
        False,
        "older DeepSpeed (deepspeed/__init__.py add_config_arguments before 0.10): find the ranks from "
        "MPI's environment; a launcher's concern, which the pinned DeepSpeed 0.19.6 no longer has",
    ),
    "--world_size": Dropped(
        True,
        f"{VILLE}'s scripts pass it, and its megatron/arguments.py (as the pinned engine's) reads the world "
        "size from the launcher's WORLD_SIZE; the porter reads the ranks from the launcher",
    ),
    "--with-stack": Dropped(False, LIUKETT_TRACE),
    "--profile-step-start": Dropped(True, LIUKETT_TRACE),
    "--profile-step-end": Dropped(True, LIUKETT_TRACE),
    "--profile-trace-path": Dropped(True, LIUKETT_TRACE),
    "--sync-tp-duplicated-parameters": Dropped(
        False,
        f"{BIGSCIENCE}: re-broadcasts the weights every tensor-parallel rank holds whole (layer norms, "
        "biases) in each forward pass, a workaround for ranks drifting apart; equal weights either way",
    ),
}
"""Flags dropped, each with the code that shows it changes nothing computed."""

RENAMED = {
    "--wandb-name": (
        "--wandb-exp-name",
        f"{OKOGE}: the W&B run's name (megatron/global_vars.py _set_wandb_writer); the pinned engine's "
        "--wandb-exp-name, recipe key logging.wandb_name (the engine logs to W&B only with "
        "logging.wandb_project set)",
    ),
    "--override-lr-scheduler": (
        "--override-opt_param-scheduler",
        "Megatron's name for --override-opt_param-scheduler before 2022 (the BigScience and ABCI forks "
        "keep it)",
    ),
}
"""Flags the pinned engine has under another name: renamed, each with why."""

VALUES = {
    ("--tokenizer-type", "PretrainedFromHF"): (
        "HFTokenizer",
        f"{BIGSCIENCE}: a Hugging Face tokenizer (AutoTokenizer of --tokenizer-name-or-path), which the "
        "pinned engine has as HFTokenizer of --tokenizer-model",
    ),
    ("--optimizer", "adamw"): (
        "adam",
        f"{ARGONNE}: torch.optim.AdamW (megatron/optimizer/__init__.py); the pinned engine's adam is "
        "apex's FusedAdam on CUDA, AdamW by default (adam_w_mode True): the same update",
    ),
    ("--optimizer", "fusedadamw"): (
        "adam",
        f"{HABANA}: habana_frameworks' FusedAdamW on Gaudi (megatron/optimizer/__init__.py), AdamW; the "
        "pinned engine's adam is AdamW on CUDA (apex FusedAdam, adam_w_mode True)",
    ),
    ("--tokenizer-type", "Llama2Tokenizer"): (
        "GPTSentencePieceTokenizer",
        f"{ARGONNE}: the SentencePiece model's pieces, its vocabulary and its end-of-document id as the "
        "pinned engine's GPTSentencePieceTokenizer has them (megatron/tokenizer/tokenizer.py "
        "_Llama2Tokenizer); it also starts each document with BOS when a dataset is prepared, which "
        "is in the prepared data, not in the training",
    ),
}
"""Values of the pinned engine's own flags that a fork spells otherwise: (flag, value) -> (value, why)."""

FLAG_RENAMED_WITH = {"--tokenizer-name-or-path": "--tokenizer-model"}
"""Flags renamed along with a VALUES change (PretrainedFromHF's folder is HFTokenizer's model)."""


@dataclass(frozen=True)
class Refused:
    """A model feature the pinned engine lacks: the fork it is from, what it does, the nearest thing."""

    fork: str
    what: str
    nearest: str


REFUSED = {
    "--embed-layernorm": Refused(
        BIGSCIENCE,
        "a layer norm after the word embeddings (BLOOM's; megatron/model/language_model.py)",
        "none: the pinned engine's GPT has no layer norm on its embeddings",
    ),
    "--position-embedding-type alibi": Refused(
        BIGSCIENCE,
        "ALiBi attention biases instead of position embeddings",
        "rotary position embeddings (model.rotary: --use-rotary-position-embeddings) or the learned "
        "absolute ones (the default)",
    ),
    "--glu-activation": Refused(
        BIGSCIENCE,
        "a GLU variant of the MLP (megatron/model/glu_activations.py: geglu, liglu, reglu, swiglu)",
        "swiglu only (--swiglu, in extra.megatron_args)",
    ),
    "--pad-vocab-size-to": Refused(
        BIGSCIENCE,
        "the vocabulary padded to this size (megatron/tokenizer/tokenizer.py)",
        "model.make_vocab_size_divisible_by, which pads to a multiple",
    ),
    "--loss-function": Refused(
        DEEPSPIN,
        "another training loss (entmax, with --entmax-topk; megatron/arguments.py)",
        "the cross-entropy loss, the pinned engine's only",
    ),
    "--tokenizer-type Llama3Tokenizer": Refused(
        HABANA,
        "Llama 3's tiktoken tokenizer read from --tokenizer-model's tiktoken file",
        "HFTokenizer with the model's Hugging Face tokenizer folder as data.tokenizer_model (the same ids), "
        "the dataset prepared with it (`zerolab prep ... --tokenizer-model FOLDER`)",
    ),
    "--tokenizer-type AbejaJapaneseGPT2Tokenizer": Refused(
        "kojimano/Megatron-DeepSpeed-ABCI (a3fbb95e)",
        "ABEJA's Japanese GPT-2 tokenizer",
        "HFTokenizer with ABEJA's Hugging Face tokenizer folder as data.tokenizer_model, the dataset "
        "prepared with it",
    ),
    "--optimizer onebitadam": Refused(
        RIVERSTONE,
        "DeepSpeed's 1-bit Adam as Megatron's optimizer (megatron/optimizer/__init__.py), its gradients "
        "compressed to one bit after a warm-up",
        "--optimizer adam (the pinned engine's optimizers are adam and sgd)",
    ),
    "--optimizer lion": Refused(
        RIVERSTONE,
        "the Lion optimizer (megatron/optimizer/__init__.py)",
        "--optimizer adam (the pinned engine's optimizers are adam and sgd)",
    ),
    "--pp-partition-method": Refused(
        BIGSCIENCE,
        "the pipeline's partition of layers into stages (counting the embeddings as layers)",
        "the pinned engine's own partition (type:transformer, megatron/model/gpt_model.py GPTModelPipe): "
        "the same model trained, its stages balanced otherwise",
    ),
}
"""Model features of forks the pinned engine does not have (a flag, or `flag value`)."""

POSITION_EMBEDDINGS = {
    "absolute": ([], "the learned absolute position embeddings, the pinned engine's default"),
    "rotary": (["--use-rotary-position-embeddings"], "the pinned engine's --use-rotary-position-embeddings"),
}
"""BigScience's --position-embedding-type values the pinned engine has."""


def data_file_list(path: Path) -> list[str] | None:
    """ALCF's --data-file-list file (`WEIGHT PREFIX CORPUS` a line, a prefix's `.bin` allowed) as
    --data-path's `WEIGHT PREFIX` words; None where the file cannot be read."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    words: list[str] = []
    for line in lines:
        if line.strip():
            parts = line.split()
            if len(parts) not in (2, 3):
                return None
            words += [parts[0], parts[1].split(".bin")[0]]
    return words or None


def translated(words: list[str]) -> tuple[list[str], list[str]]:
    """`words` (the arguments after pretrain_gpt.py) with fork flags renamed or dropped, and a note
    for each; UserError naming every fork feature the pinned engine lacks."""
    notes, refused, out = [], [], []
    given = {flag for flag, _ in groups(words)}
    for flag, values in groups(words):
        if flag == "--wandb-name" and "--wandb-project" not in given:
            notes.append(f"--wandb-name {values[0] if values else ''}: a fork's W&B run name ({OKOGE}: its "
                         "W&B writer's project is fixed in its code); the pinned engine logs to W&B only "
                         "with a project, which your launch does not name: left out (set "
                         "logging.wandb_project and logging.wandb_name to log there)")  # fmt: skip
            out += values[1:]
            continue
        if flag == "--profile" and not values:  # the fork's switch; the pinned engine's takes pt or pt-full
            notes.append(f"--profile: changes nothing the run computes ({LIUKETT_TRACE}); left out")
            continue
        if flag == "--data-file-list":
            listed = data_file_list(Path(values[0])) if values else None
            named = f"--data-file-list {values[0] if values else ''}"
            if listed is None:
                refused.append(
                    f"{named}: {ARGONNE} reads the weighted dataset prefixes from this file "
                    "(pretrain_gpt_alcf.py), not on this machine; port where it is, or give them as "
                    "data.path 'WEIGHT PREFIX ...'"
                )
                continue
            notes.append(
                f"{named}: {ARGONNE}'s `weight prefix corpus` lines as the pinned engine's --data-path "
                f"({len(listed) // 2} prefixes by weight); the corpus names, by which the fork groups and "
                "shuffles samples (megatron/data/gpt_dataset.py), left out: the same mixture, the samples in "
                "another order"
            )
            out += ["--data-path", *listed, *values[1:]]
            continue
        if flag in DROPPED:
            dropped = DROPPED[flag]
            kept = values[1:] if dropped.takes_value else values
            shown = f"{flag} {values[0]}" if dropped.takes_value and values else flag
            notes.append(f"{shown}: changes nothing the run computes ({dropped.why}); left out")
            out += kept
            continue
        if flag == "--position-embedding-type" and values and values[0] in POSITION_EMBEDDINGS:
            flags, why = POSITION_EMBEDDINGS[values[0]]
            notes.append(f"--position-embedding-type {values[0]} ({BIGSCIENCE}): {why}")
            out += [*flags, *values[1:]]
            continue
        key = f"{flag} {values[0]}" if values and f"{flag} {values[0]}" in REFUSED else flag
        if key in REFUSED:
            feature = REFUSED[key]
            refused.append(f"{key}: {feature.what}, from {feature.fork}; the pinned engine has no such "
                           f"feature. Nearest: {feature.nearest}")  # fmt: skip
            continue
        if flag in RENAMED:
            name, why = RENAMED[flag]
            notes.append(f"{flag}: renamed {name} ({why})")
            flag = name
        if flag in FLAG_RENAMED_WITH:
            notes.append(f"{flag}: renamed {FLAG_RENAMED_WITH[flag]}, with the tokenizer it names")
            flag = FLAG_RENAMED_WITH[flag]
        if values and (flag, values[0]) in VALUES:
            value, why = VALUES[(flag, values[0])]
            notes.append(f"{flag} {values[0]}: {flag} {value} ({why})")
            values = [value, *values[1:]]
        out += [flag, *values]
    if refused:
        raise UserError(
            "your launch asks for what the pinned engine does not have, so no recipe can train it as it "
            "trained:\n" + "\n".join(f"- {line}" for line in refused)
        )
    return out, notes
