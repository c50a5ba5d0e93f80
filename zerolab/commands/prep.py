"""`zerolab prep ...`: the data-prep commands and their options."""

from __future__ import annotations

import argparse
import contextlib
import os
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from zerolab.contracts import GLUE_TASKS
from zerolab.data_prep.folders import check_folder
from zerolab.data_prep.inspection import inspect
from zerolab.data_prep.pipeline import PrepJob, enter_output_folder, run
from zerolab.data_prep.records import TEXT_LINES, DollyFields, JsonField
from zerolab.data_prep.sources import HubDataset, LineFiles, RecordFiles, WholeFiles, check_files
from zerolab.data_prep.splits import SPLIT_NAMES, parse_split
from zerolab.data_prep.tokenizer import MEGATRON_SENTENCEPIECE, SENTENCEPIECE, Tokenizer
from zerolab.data_prep.wikitext import HUB_DATASET, VERSIONS, WikiTextFile, WikiTextHub, hub_config
from zerolab.errors import UserError
from zerolab.finetune.glue import HUB_DATASET as GLUE_DATASET
from zerolab.finetune.glue import glue_task
from zerolab.finetune.prep import prep_glue

DOLLY_DATASET = "databricks/databricks-dolly-15k"
OPENWEBTEXT_DATASET = "Skylion007/openwebtext"
DOLLY_SUFFIXES = (".jsonl", ".json", ".parquet")


def default_workers() -> int:
    """Every core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


OUT_FOLDER_HELP = (
    "; a folder (ending in /, or . or ..) gets the files inside it, named after the corpus: {name}"
)


def _common(parser: argparse.ArgumentParser, out_help: str, *, splittable: bool = True) -> None:
    parser.add_argument("--out", required=True, metavar="OUT", help=out_help)
    parser.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        help="tokenizer processes (default: every core, here %(default)s)",
    )
    if splittable:
        parser.add_argument(
            "--split",
            metavar="TRAIN,VALID,TEST",
            help="also deal documents into fixed splits, e.g. 98,1,1: writes OUT_train_text_document, "
            "OUT_valid_..., OUT_test_... instead of OUT_text_document",
        )
    parser.add_argument(
        "--on-error",
        choices=("stop", "skip"),
        default="stop",
        help="bad records (malformed JSON, missing key, not UTF-8, empty): stop with file:line "
        "and exit 2 (default), or skip them and count them in the manifest",
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild even when the output is already complete"
    )
    parser.add_argument(
        "--shard-mb",
        type=float,
        default=256.0,
        help="input MB per resumable shard: a killed run resumes after its last finished "
        "shard (default %(default)s)",
    )
    parser.add_argument(
        "--tokenizer-model",
        metavar="MODEL",
        help="a SentencePiece model file (e.g. Llama's tokenizer.model): write its ids, as Megatron's "
        "GPTSentencePieceTokenizer reads text, each document ended by its end-of-sentence id, for a recipe "
        "with data.tokenizer_type GPTSentencePieceTokenizer; or a Hugging Face tokenizer folder "
        "(tokenizer.json and tokenizer_config.json): its ids as Megatron's HFTokenizer reads text, each "
        "document ended by its eos token, for data.tokenizer_type HFTokenizer; data.tokenizer_model MODEL "
        "either way (default: GPT-2's BPE)",
    )
    parser.add_argument(
        "--tokenizer-type",
        choices=[SENTENCEPIECE, MEGATRON_SENTENCEPIECE],
        default=SENTENCEPIECE,
        help="with a SentencePiece --tokenizer-model: the Megatron class the recipe reads it with; "
        "SentencePieceTokenizer adds Megatron's special tokens (<CLS> <SEP> <EOD> <MASK>) and ends each "
        "document with <EOD> (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar or messages, only the summary")


def run_prep(words: list[str]) -> int:
    """`zerolab prep WORDS...` as another command runs it (the demo); UserError as from the command."""
    parser = argparse.ArgumentParser(prog="zerolab")
    register(parser.add_subparsers())
    args = parser.parse_args(["prep", *words])
    return int(args.run(args) or 0)


def register(subparsers) -> None:
    """Add `zerolab prep` and its sub-commands."""
    prep = subparsers.add_parser(
        "prep",
        help="corpora into Megatron indexed binaries (PREFIX_text_document.bin/.idx)",
        description="Tokenize a corpus with GPT-2's BPE (ids identical to Megatron's GPT2BPETokenizer), "
        "or with --tokenizer-model's SentencePiece model or Hugging Face folder (GPTSentencePieceTokenizer's "
        "or HFTokenizer's ids), into Megatron's "
        "indexed dataset, an end-of-document id after each document.",
    )
    commands = prep.add_subparsers(dest="prep_command", metavar="CORPUS", required=True)

    dolly = commands.add_parser(
        "dolly", help="databricks-dolly-15k (HF datasets, or a local .jsonl/.json/.parquet)",
        description="Each record becomes one document: context, instruction and response joined by "
        "--separator, empty fields left out.",
    )  # fmt: skip
    _common(dolly, "output prefix, e.g. data/dolly (writes data/dolly_text_document.bin/.idx)"
            + OUT_FOLDER_HELP.format(name="data/ writes data/dolly_text_document.*"))  # fmt: skip
    dolly.add_argument("--input", help="local dolly file (.jsonl, .json or .parquet; .gz/.zst too) "
                       f"instead of loading {DOLLY_DATASET} through HF datasets")  # fmt: skip
    dolly.add_argument("--dataset", default=DOLLY_DATASET,
                       help="HF dataset name or local dataset directory (default %(default)s)")  # fmt: skip
    dolly.add_argument("--separator", default="\\n",
                       help="text between context, instruction and response; \\n and \\t are understood "
                       "(default \\n)")  # fmt: skip
    dolly.add_argument("--keep-empty-fields", action="store_true",
                       help="join empty fields too (an empty context then leaves a leading separator), as "
                       "the reference golden files were made")  # fmt: skip
    dolly.set_defaults(run=_run_dolly)

    owt = commands.add_parser("openwebtext", help="OpenWebText (HF datasets, streamed, or local JSONL files)")
    _common(owt, "output prefix, e.g. data/owt (writes data/owt_text_document.bin/.idx)"
            + OUT_FOLDER_HELP.format(name="data/ writes data/openwebtext_text_document.*"))  # fmt: skip
    owt.add_argument("--input", nargs="+", metavar="FILE",
                     help=f"local JSONL files with a 'text' key (.gz/.zst too) instead of streaming "
                     f"{OPENWEBTEXT_DATASET}")  # fmt: skip
    owt.add_argument("--dataset", default=OPENWEBTEXT_DATASET,
                     help="HF dataset name or local dataset directory (default %(default)s)")  # fmt: skip
    owt.set_defaults(run=_run_openwebtext)

    wikitext = commands.add_parser(
        "wikitext", help="WikiText-2 or -103 (HF datasets, or Salesforce's wiki.*.raw files), its own splits",
        description="Each article becomes one document, its lines as they are. Writes "
        "OUT_train_text_document, OUT_valid_text_document and OUT_test_text_document from the "
        "dataset's own splits (with files: those given); train on train, and leave test to "
        "`zerolab eval --task wikitext`.",
    )  # fmt: skip
    _common(
        wikitext,
        "output prefix, e.g. data/wikitext103 (writes its _train, _valid, _test_text_document)"
        + OUT_FOLDER_HELP.format(
            name="data/ writes data/wikitext103_train_text_document.* (--version 2: wikitext2_...; from "
            "files: wikitext_...)"
        ),
        splittable=False,
    )
    wikitext.add_argument("--version", choices=VERSIONS, default="103",
                          help="WikiText-2 or WikiText-103 (hub configuration wikitext-N-raw-v1; "
                          "default %(default)s)")  # fmt: skip
    wikitext.add_argument("--dataset", default=HUB_DATASET,
                          help="HF dataset name or local dataset directory with the wikitext-N-raw-v1 "
                          "configurations (default %(default)s)")  # fmt: skip
    for split in SPLIT_NAMES:
        wikitext.add_argument(f"--{split}", metavar="FILE",
                              help=f"local {split} file (e.g. wiki.{split}.raw; .gz/.zst too) instead of "
                              "the hub; give any of --train, --valid, --test")  # fmt: skip
    wikitext.set_defaults(run=_run_wikitext)

    jsonl = commands.add_parser("jsonl", help="any JSONL corpus, one document per line")
    jsonl.add_argument("files", nargs="+", metavar="FILE", help="JSONL files (.gz/.zst too)")
    _common(jsonl, "output prefix (writes OUT_text_document.bin/.idx)" + OUT_FOLDER_HELP.format(
        name="the input file's name (data/ with corpus.jsonl.gz writes data/corpus_text_document.*), "
        "jsonl for several files"))  # fmt: skip
    jsonl.add_argument("--key", default="text", help="the field holding each document (default %(default)s)")
    jsonl.set_defaults(run=_run_jsonl)

    text = commands.add_parser("text", help="plain UTF-8 text files")
    text.add_argument("files", nargs="+", metavar="FILE", help="text files (.gz/.zst too)")
    _common(text, "output prefix (writes OUT_text_document.bin/.idx)" + OUT_FOLDER_HELP.format(
        name="the input file's name (data/ with books.txt writes data/books_text_document.*), text for "
        "several files"))  # fmt: skip
    text.add_argument("--document", choices=("file", "line"), default="file",
                      help="one document per file (default) or per non-empty line")  # fmt: skip
    text.set_defaults(run=_run_text)

    glue = commands.add_parser(
        "glue", help="a GLUE task's train and validation splits, for fine-tuning (HF datasets)",
        description="Writes OUT/TASK_train.jsonl and OUT/TASK_validation.jsonl (MNLI: "
        "_validation_matched and _validation_mismatched), GLUE's columns one JSON object a line: "
        "the files the fine-tuning loop reads (docs/fine-tuning.md).",
    )  # fmt: skip
    glue.add_argument("task", help=f"the task: {', '.join(GLUE_TASKS)}")
    glue.add_argument("--out", default="data/glue", help="folder of the files (default %(default)s)")
    glue.add_argument("--dataset", default=GLUE_DATASET,
                      help="HF dataset name or local dataset directory with the task's configuration "
                      "(default %(default)s)")  # fmt: skip
    glue.add_argument("--quiet", action="store_true", help="no progress bar, only the summary")
    glue.set_defaults(run=_run_glue)

    inspect = commands.add_parser("inspect", help="facts and decoded documents of a prepared dataset; "
                                  "exit 1 when .bin and .idx disagree")  # fmt: skip
    inspect.add_argument("prefix", help="e.g. data/dolly or data/dolly_text_document, or the folder of "
                         "one dataset")  # fmt: skip
    inspect.add_argument(
        "--show", type=int, default=3, help="decoded documents to print (default %(default)s)"
    )
    inspect.set_defaults(run=_run_inspect)


def out_prefix(out: str, name: str) -> Path:
    """--out as the prefix of the output files: as given, or for a folder (a path ending in /, or
    . or ..) `name` inside it."""
    if not out.strip():
        raise UserError("--out '': give an output prefix such as data/dolly, or a folder such as data/")
    last = out.rstrip("/" + os.sep).rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]
    if out.endswith(("/", os.sep)) or last in (".", ".."):
        return Path(out) / name
    return Path(out)


def _named_after(files: list[str], corpus: str) -> str:
    """The name of the output in an --out folder for these input files: the one file's name without
    its extensions (corpus.jsonl.gz: corpus), else the corpus."""
    if len(files) != 1:
        return corpus
    name = Path(files[0]).name
    for suffix in (".gz", ".zst", ".zstd"):
        name = name.removesuffix(suffix)
    return Path(name).stem or corpus


def _job(args, corpus: str, source, fmt, name: str | None = None):
    """The job of a prep command; `name`: the output's name in an --out folder (the corpus's)."""
    if args.workers < 1:
        raise UserError(f"--workers {args.workers}: give at least 1")
    if args.shard_mb <= 0:
        raise UserError(f"--shard-mb {args.shard_mb}: give a positive size")
    split = getattr(args, "split", None)  # wikitext comes split: no --split
    return PrepJob(
        out=out_prefix(args.out, name or corpus), corpus=corpus, source=source, fmt=fmt, workers=args.workers,
        on_error=args.on_error, split=parse_split(split) if split else None, force=args.force,
        shard_bytes=int(args.shard_mb * 1e6), quiet=args.quiet, tokenizer=_tokenizer(args),
    )  # fmt: skip


def _tokenizer(args) -> Tokenizer:
    """GPT-2's BPE, or the SentencePiece model or Hugging Face folder of --tokenizer-model (checked:
    UserError naming it)."""
    if not args.tokenizer_model:
        return Tokenizer()
    path = Path(args.tokenizer_model)
    if not path.exists():
        raise UserError(
            f"--tokenizer-model {path}: no such file or folder; give the SentencePiece model "
            "(tokenizer.model) "
            "or the Hugging Face tokenizer folder that your recipe's data.tokenizer_model names"
        )
    megatron = args.tokenizer_type == MEGATRON_SENTENCEPIECE
    if megatron and path.is_dir():
        raise UserError(
            f"--tokenizer-type {MEGATRON_SENTENCEPIECE} reads a SentencePiece model file, and "
            f"--tokenizer-model {path} is a folder (a Hugging Face tokenizer: leave --tokenizer-type out)"
        )
    tokenizer = Tokenizer(path, megatron_specials=megatron)
    tokenizer.load()
    return tokenizer


def _run(job) -> int:

    return run(job)


def _run_dolly(args) -> int:

    separator = args.separator.replace("\\n", "\n").replace("\\t", "\t")
    fmt = DollyFields(separator=separator, keep_empty=args.keep_empty_fields)
    if args.input:
        (path,) = check_files([args.input])
        kind = next((s for s in DOLLY_SUFFIXES if s in path.suffixes), None)
        if kind is None:
            raise UserError(f"--input {path}: give a .jsonl, .json or .parquet file (optionally .gz/.zst)")
        source = LineFiles([path]) if kind == ".jsonl" else RecordFiles([path], columns=fmt.keys)
    else:
        source = HubDataset(args.dataset)
    return _run(_job(args, "dolly", source, fmt))


def _run_openwebtext(args) -> int:

    source = LineFiles(check_files(args.input)) if args.input else HubDataset(args.dataset, streaming=True)
    return _run(_job(args, "openwebtext", source, JsonField("text")))


def _run_wikitext(args) -> int:
    files = {split: getattr(args, split) for split in SPLIT_NAMES if getattr(args, split)}
    if files:
        checked = dict(zip(files, check_files(list(files.values())), strict=True))
        sources = {split: WikiTextFile(path) for split, path in checked.items()}
    else:
        sources = {split: WikiTextHub(args.version, split, args.dataset) for split in SPLIT_NAMES}
    corpus = "wikitext" if files else hub_config(args.version)
    out = out_prefix(args.out, "wikitext" if files else f"wikitext{args.version}")
    jobs = [
        replace(_job(args, f"{corpus} {split}", source, JsonField()), out=Path(f"{out}_{split}"))
        for split, source in sources.items()
    ]
    return run(*jobs)  # all splits or none


def _run_jsonl(args) -> int:

    source = LineFiles(check_files(args.files))
    return _run(_job(args, "jsonl", source, JsonField(args.key), _named_after(args.files, "jsonl")))


def _run_text(args) -> int:

    files = check_files(args.files)
    source = WholeFiles(files) if args.document == "file" else LineFiles(files, kind=TEXT_LINES)
    return _run(_job(args, "text", source, JsonField(), _named_after(args.files, "text")))


def _run_glue(args) -> int:
    task = glue_task(args.task, "zerolab prep glue TASK")
    if not args.out.strip():
        raise UserError("--out '': give the folder of the files, e.g. data/glue")
    check_folder(Path(args.out), "the folder of the files")
    with contextlib.ExitStack() as stack:  # made before the dataset is read; removed if that fails
        enter_output_folder(stack, Path(args.out))
        written = prep_glue(task, Path(args.out), args.dataset, quiet=args.quiet)
    rows = ", ".join(f"{split} {count:,} rows" for split, count in written.items())
    print(f"zerolab: {task.name} from {args.dataset} into {args.out}: {rows}")
    return 0


def _run_inspect(args) -> int:

    return inspect(args.prefix, args.show, Console(soft_wrap=True))
