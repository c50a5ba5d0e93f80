"""Run a prep job: stream batches to worker processes, write resumable shards, merge.

Layout while running: `PREFIX_text_document.partial/` holds `state.json` (what is being
made), and per shard `shard-NNNNNN.<split>.bin`, `.sizes` and a done-marker
`shard-NNNNNN.done.json` written last (input position and running counts). A killed
run resumes after its last done shard. At the end the shards are concatenated into
`.bin.tmp`/`.idx.tmp`, renamed into place, and the manifest is written last: an output
without its manifest is never treated as finished.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from zerolab import __version__
from zerolab.checksums import sha256_of
from zerolab.data_prep.indexed import token_dtype, write_index
from zerolab.data_prep.records import encode_batch
from zerolab.data_prep.sources import START
from zerolab.data_prep.splits import SPLIT_NAMES, deal_pattern
from zerolab.data_prep.tokenizer import VOCAB_SIZE, gpt2_encoding, tokenizer_facts
from zerolab.errors import UserError
from zerolab.files import folders_made, write_atomic, write_json_atomic

SUFFIX = "_text_document"
MAX_EXAMPLES = 20


@dataclass
class PrepJob:
    """Everything that decides one prep run."""

    out: Path
    corpus: str
    source: object
    fmt: object
    workers: int
    on_error: str = "stop"
    split: tuple[int, ...] | None = None
    force: bool = False
    shard_bytes: int = 256 << 20
    quiet: bool = False

    def outputs(self) -> dict[str, Path]:
        """Output prefix (without .bin/.idx) per split name ('all' when not split)."""
        if not self.split:
            return {"all": Path(f"{self.out}{SUFFIX}")}
        names = [n for n, w in zip(SPLIT_NAMES, self.split, strict=False) if w > 0]
        return {name: Path(f"{self.out}_{name}{SUFFIX}") for name in names}

    def options(self) -> dict:
        """The options that decide the output's bytes (recorded, and compared on rerun)."""
        return {
            "corpus": self.corpus,
            "record_format": {"type": type(self.fmt).__name__, **vars(self.fmt)},
            "on_error": self.on_error,
            "split": list(self.split) if self.split else None,
            "append_eod": True,
            "dtype": token_dtype(VOCAB_SIZE).name,
        }

    def fingerprint(self) -> str:
        facts = {"options": self.options(), "source": self.source.describe(), "tokenizer": tokenizer_facts()}
        return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Counts:
    """Running totals, saved in every done-marker so that a resumed run continues them."""

    records: int = 0
    input_bytes: int = 0
    documents: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    skipped: int = 0
    skipped_by_reason: dict = field(default_factory=dict)
    skipped_examples: list = field(default_factory=list)

    def total_documents(self) -> int:
        return sum(self.documents.values())

    def total_tokens(self) -> int:
        return sum(self.tokens.values())


def run(job: PrepJob) -> int:
    """Prepare the corpus; returns the exit status (0, or 2 through UserError)."""
    outputs = job.outputs()
    fingerprint = job.fingerprint()
    base = Path(f"{job.out}{SUFFIX}")
    workdir = Path(f"{base}.partial")
    if _finished(outputs, fingerprint, job.force):
        _say(job, f"[green]already prepared[/]: {', '.join(f'{p}.bin' for p in outputs.values())} "
             "(pass --force to rebuild)")  # fmt: skip
        return 0
    if job.force:
        for prefix in outputs.values():
            Path(f"{prefix}.manifest.json").unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    _check_outputs(outputs)
    with folders_made(base.parent):
        done, counts, position = _resume_point(job, workdir, fingerprint)
        started = time.perf_counter()
        before = Counts(counts.records, counts.input_bytes, dict(counts.documents), dict(counts.tokens))
        try:
            counts = _process(job, workdir, done, counts, position, outputs)
            refusal = _empty_output(job, counts)
            if refusal:
                shutil.rmtree(workdir)
                raise UserError(refusal)
            facts = _merge(job, workdir, outputs, counts, fingerprint)
        except BaseException:
            if not any(workdir.glob("*.done.json")):
                shutil.rmtree(workdir, ignore_errors=True)  # nothing to resume from
            raise
    shutil.rmtree(workdir)
    _summary(job, counts, before, facts, time.perf_counter() - started)
    return 0


def _check_outputs(outputs: dict[str, Path]) -> None:
    """UserError when an output file's path is taken by a directory, or its folder by a file."""
    for prefix in outputs.values():
        for suffix in (".bin", ".idx", ".manifest.json"):
            path = Path(f"{prefix}{suffix}")
            if path.is_dir():
                raise UserError(
                    f"--out: {path} is a directory, where the output file goes; move it or choose --out"
                )
        folder = next((parent for parent in prefix.parents if parent.exists()), None)
        if folder is not None and not folder.is_dir():
            raise UserError(
                f"--out: {folder} is a file, where a folder of the output goes; choose another --out"
            )


def _empty_output(job: PrepJob, counts: Counts) -> str | None:
    """Why the output would hold no documents (or a split none), or None: an empty dataset
    cannot train, nor an empty split validate."""
    total = counts.total_documents()
    if total == 0:
        skipped = ""
        if counts.skipped:
            reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.skipped_by_reason.items()))
            skipped = f", all skipped ({reasons})"
        return (
            f"{_input_names(job)}: no documents to write ({counts.records:,} records read{skipped}); "
            "an empty dataset cannot train, so nothing was written. Check the input: is it empty, "
            "does each record hold its text under the key given (--key for jsonl)?"
        )
    empty = [name for name, documents in counts.documents.items() if documents == 0]
    if not empty:
        return None
    shares = ", ".join(f"{name} {documents:,}" for name, documents in counts.documents.items())
    weights = ",".join(map(str, job.split or ()))
    return (
        f"--split {weights}: the {' and '.join(empty)} split would get 0 of the {total:,} documents "
        f"({shares}); an empty split cannot be read, so nothing was written. Give "
        f"{' and '.join(empty)} a larger weight, prepare more documents, or leave "
        f"{'them' if len(empty) > 1 else 'it'} out (weight 0)"
    )


def _input_names(job: PrepJob) -> str:
    """The input files (or dataset) of a job, for messages."""
    described = job.source.describe()
    if "files" in described:
        return ", ".join(entry["path"] for entry in described["files"])
    return str(described.get("dataset"))


def _finished(outputs: dict[str, Path], fingerprint: str, force: bool) -> bool:
    """Whether a complete output of this very job exists (then a rerun is a no-op)."""
    manifests = [Path(f"{p}.manifest.json") for p in outputs.values()]
    if force or not all(m.is_file() for m in manifests):
        return False
    for prefix, manifest_path in zip(outputs.values(), manifests, strict=True):
        manifest = json.loads(manifest_path.read_text())
        intact = all(
            Path(f"{prefix}.{ext}").is_file()
            and Path(f"{prefix}.{ext}").stat().st_size == manifest["files"][ext]["bytes"]
            for ext in ("bin", "idx")
        )
        if manifest.get("fingerprint") != fingerprint:
            raise UserError(
                f"{prefix}.bin exists, made from another input or with other options "
                f"(see {manifest_path}); pass --force to rebuild it, or choose another --out"
            )
        if not intact:
            raise UserError(f"{prefix}.bin/.idx do not match {manifest_path}; pass --force to rebuild them")
    return True


def _resume_point(job: PrepJob, workdir: Path, fingerprint: str):
    """(done shard count, counts so far, input position) from an earlier killed run."""
    state = workdir / "state.json"
    if workdir.is_dir() and (
        not state.is_file() or json.loads(state.read_text()) != {"fingerprint": fingerprint}
    ):
        _say(job, f"[yellow]discarding[/] {workdir}: left by a run with other input or options")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"fingerprint": fingerprint}))
    done = 0
    while (workdir / f"shard-{done:06d}.done.json").is_file():
        done += 1
    if not done:
        return 0, Counts(), dict(START)
    marker = json.loads((workdir / f"shard-{done - 1:06d}.done.json").read_text())
    counts = Counts(**marker["counts"])
    _say(job, f"resuming after {done} finished shards ({counts.records:,} records)")
    return done, counts, marker["position"]


class ShardWriter:
    """One shard: a .bin and .sizes per split, then its done-marker."""

    def __init__(self, workdir: Path, number: int, names: list[str]):
        self.workdir = workdir
        self.stem = f"shard-{number:06d}"
        self.bins = {name: open(workdir / f"{self.stem}.{name}.bin.tmp", "wb") for name in names}  # noqa: SIM115
        self.sizes: dict[str, list[np.ndarray]] = {name: [] for name in names}
        self.input_bytes = 0

    def add(self, name: str, tokens: np.ndarray, sizes: np.ndarray) -> None:
        self.bins[name].write(tokens.tobytes())
        self.sizes[name].append(sizes)

    def finish(self, position: dict, counts: Counts) -> None:
        for name, handle in self.bins.items():
            handle.close()
            sizes = np.concatenate(self.sizes[name]) if self.sizes[name] else np.empty(0, np.int32)
            sizes.astype("<i4").tofile(self.workdir / f"{self.stem}.{name}.sizes")
            os.replace(handle.name, self.workdir / f"{self.stem}.{name}.bin")
        marker = self.workdir / f"{self.stem}.done.json"
        write_atomic(marker, json.dumps({"position": position, "counts": vars(counts)}))


def _results(job: PrepJob, batches, dtype: str):
    """Worker results in input order, at most a few batches in flight (bounded memory)."""
    gpt2_encoding()  # built once here, inherited by the forked workers
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with multiprocessing.get_context(method).Pool(job.workers) as pool:
        pending: deque = deque()
        for batch, position, nbytes in batches:
            pending.append(
                (pool.apply_async(encode_batch, (batch, job.fmt, job.on_error, dtype)), position, nbytes)
            )
            if len(pending) > 2 * job.workers:
                result, position, nbytes = pending.popleft()
                yield result.get(), position, nbytes
        while pending:
            result, position, nbytes = pending.popleft()
            yield result.get(), position, nbytes


def _process(job: PrepJob, workdir: Path, done: int, counts: Counts, position: dict, outputs: dict) -> Counts:
    names = list(outputs)
    for name in names:
        counts.documents.setdefault(name, 0)
        counts.tokens.setdefault(name, 0)
    dtype = token_dtype(VOCAB_SIZE).name
    pattern = deal_pattern(tuple(w for w in job.split if w > 0)) if job.split else None
    shard = ShardWriter(workdir, done, names)
    started = time.perf_counter()
    already = counts.input_bytes
    before = Counts(documents=dict(counts.documents), tokens=dict(counts.tokens))
    with _progress(job) as progress:
        task = progress.add_task(job.corpus, total=job.source.total_bytes(), completed=already, rates="")
        for result, end, nbytes in _results(job, job.source.batches(position), dtype):
            if result.stopped:
                _, where, detail = result.problems[0]
                raise UserError(
                    f"{where}: {detail}. Fix the record, or pass --on-error skip to leave such "
                    "records out (they are counted in the manifest)"
                )
            _count(counts, result, nbytes)
            _write(shard, names, pattern, counts, result)
            shard.input_bytes += nbytes
            position = end
            if shard.input_bytes >= job.shard_bytes:
                shard.finish(position, counts)
                done += 1
                shard = ShardWriter(workdir, done, names)
            elapsed = max(time.perf_counter() - started, 1e-9)
            rate = (counts.input_bytes - already) / elapsed
            progress.update(
                task, completed=counts.input_bytes, rates=_rate_text(counts, before, rate, elapsed)
            )
        shard.finish(position, counts)
    return counts


def _count(counts: Counts, result, nbytes: int) -> None:
    counts.records += result.records
    counts.input_bytes += nbytes
    for reason, where, detail in result.problems:
        counts.skipped += 1
        counts.skipped_by_reason[reason] = counts.skipped_by_reason.get(reason, 0) + 1
        if len(counts.skipped_examples) < MAX_EXAMPLES:
            counts.skipped_examples.append({"where": where, "reason": reason, "detail": detail})


def _write(shard: ShardWriter, names: list[str], pattern, counts: Counts, result) -> None:
    if pattern is None:
        (name,) = names
        shard.add(name, result.tokens, result.sizes)
        counts.documents[name] += len(result.sizes)
        counts.tokens[name] += len(result.tokens)
        return
    first = counts.total_documents()
    assigned = pattern[(first + np.arange(len(result.sizes))) % len(pattern)]
    per_token = np.repeat(assigned, result.sizes)
    for k, name in enumerate(names):
        chosen = assigned == k
        tokens = result.tokens[per_token == k]
        shard.add(name, tokens, result.sizes[chosen])
        counts.documents[name] += int(chosen.sum())
        counts.tokens[name] += len(tokens)


def _merge(job: PrepJob, workdir: Path, outputs: dict, counts: Counts, fingerprint: str) -> dict:
    """Concatenate the shards into each output's .bin/.idx, then write its manifest."""
    shards = sorted(workdir.glob("shard-*.done.json"))
    dtype = token_dtype(VOCAB_SIZE)
    facts = {}
    for name, prefix in outputs.items():
        bin_tmp, idx_tmp = Path(f"{prefix}.bin.tmp"), Path(f"{prefix}.idx.tmp")
        try:
            digest = hashlib.sha256()
            with open(bin_tmp, "wb") as out:
                for marker in shards:
                    with open(workdir / marker.name.replace("done.json", f"{name}.bin"), "rb") as part:
                        while block := part.read(1 << 22):
                            digest.update(block)
                            out.write(block)

            def size_chunks(name=name):
                for marker in shards:
                    yield np.fromfile(
                        workdir / marker.name.replace("done.json", f"{name}.sizes"), dtype="<i4"
                    )

            write_index(idx_tmp, size_chunks, counts.documents[name], dtype)
            files = {
                "bin": {
                    "name": f"{prefix.name}.bin",
                    "bytes": bin_tmp.stat().st_size,
                    "sha256": digest.hexdigest(),
                },
                "idx": {
                    "name": f"{prefix.name}.idx",
                    "bytes": idx_tmp.stat().st_size,
                    "sha256": sha256_of(idx_tmp),
                },
            }
            os.replace(bin_tmp, f"{prefix}.bin")
            os.replace(idx_tmp, f"{prefix}.idx")
        except BaseException:
            bin_tmp.unlink(missing_ok=True)
            idx_tmp.unlink(missing_ok=True)
            raise
        manifest = _manifest(job, name, counts, files, fingerprint)
        manifest_path = Path(f"{prefix}.manifest.json")
        write_json_atomic(manifest_path, manifest)
        facts[name] = (prefix, files)
    return facts


def manifest_source(prefix: str | Path) -> str | None:
    """What the dataset at `prefix` was prepared from, by its manifest (`zerolab prep dolly from
    data_prep/samples/dolly151.jsonl`), or None without a readable one."""
    try:
        manifest = json.loads(Path(f"{prefix}.manifest.json").read_text())
        source = manifest["source"]
        inputs = [entry["path"] for entry in source.get("files", [])] or [str(source.get("dataset"))]
        return f"`zerolab prep {manifest['corpus']}` from {', '.join(inputs)}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _manifest(job: PrepJob, name: str, counts: Counts, files: dict, fingerprint: str) -> dict:
    return {
        "zerolab_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "corpus": job.corpus,
        "source": job.source.describe(),
        "split": None if name == "all" else name,
        "records_read": counts.records,
        "input_bytes": counts.input_bytes,
        "documents_written": counts.documents[name],
        "tokens_written": counts.tokens[name],
        "tokens_include_eod": True,
        "skipped_records": {
            "count": counts.skipped,
            "by_reason": counts.skipped_by_reason,
            "first_examples": counts.skipped_examples,
        },
        "dtype": token_dtype(VOCAB_SIZE).name,
        "tokenizer": tokenizer_facts(),
        "options": {**job.options(), "workers": job.workers},
        "files": files,
        "fingerprint": fingerprint,
    }


def _progress(job: PrepJob):

    console = Console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=20),
        TaskProgressColumn(),
        TextColumn("{task.fields[rates]}"),
        TimeElapsedColumn(),
        console=console,
        disable=job.quiet or not console.is_terminal,  # off a terminal it would only leave a blank line
        transient=True,
    )


def _rate_text(counts: Counts, before: Counts, rate: float, elapsed: float) -> str:
    docs = counts.total_documents() - before.total_documents()
    tokens = counts.total_tokens() - before.total_tokens()
    return (
        f"{counts.total_documents():,} docs · {docs / elapsed:,.0f} docs/s · "
        f"{tokens / elapsed / 1e6:.2f}M tokens/s · {rate / 1e6:.1f} MB/s"
    )


def _say(job: PrepJob, text: str) -> None:
    if not job.quiet:
        Console(stderr=True).print(text)


def _summary(job: PrepJob, counts: Counts, before: Counts, facts: dict, seconds: float) -> None:

    console = Console(soft_wrap=True)
    for name, (prefix, files) in facts.items():
        console.print(
            f"wrote [bold]{prefix}[/].bin/.idx: {counts.documents[name]:,} documents, "
            f"{counts.tokens[name]:,} tokens ({files['bin']['bytes'] / 1e6:.1f} MB), {prefix}.manifest.json"
        )
    skipped = f", skipped {counts.skipped:,} ({counts.skipped_by_reason})" if counts.skipped else ""
    docs = counts.total_documents() - before.total_documents()
    tokens = counts.total_tokens() - before.total_tokens()
    megabytes = (counts.input_bytes - before.input_bytes) / 1e6
    resumed = f" (resumed after {before.records:,} records)" if before.records else ""
    console.print(
        f"{counts.records:,} records read{skipped}; this run{resumed}: {megabytes:.1f} MB in "
        f"{seconds:.1f} s, {docs / seconds:,.0f} docs/s, {tokens / seconds:,.0f} tokens/s, "
        f"{megabytes / seconds:.1f} MB/s"
    )
