"""Run a prep job: stream batches to worker processes, write resumable shards, merge.

Layout while running: `PREFIX_text_document.partial/` holds `state.json` (what is being
made), and per shard `shard-NNNNNN.<split>.bin`, `.sizes` and a done-marker
`shard-NNNNNN.done.json` written last (input position and running counts). A killed
run resumes after its last done shard. At the end the shards are concatenated into
`.bin.tmp`/`.idx.tmp`, renamed into place, and the manifest is written last: an output
without its manifest is never treated as finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from zerolab import __version__
from zerolab.checksums import sha256_of
from zerolab.data_prep.folders import check_folder
from zerolab.data_prep.indexed import token_dtype, write_index
from zerolab.data_prep.records import encode_batch
from zerolab.data_prep.sources import START
from zerolab.data_prep.splits import SPLIT_NAMES, deal_pattern
from zerolab.data_prep.tokenizer import Tokenizer
from zerolab.errors import Interrupted, UserError
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
    tokenizer: Tokenizer = field(default_factory=Tokenizer)

    def outputs(self) -> dict[str, Path]:
        """Output prefix (without .bin/.idx) per split name ('all' when not split)."""
        if not self.split:
            return {"all": Path(f"{self.out}{SUFFIX}")}
        names = [n for n, w in zip(SPLIT_NAMES, self.split, strict=False) if w > 0]
        return {name: Path(f"{self.out}_{name}{SUFFIX}") for name in names}

    def dtype(self) -> np.dtype:
        """The token ids' type in the .bin and .idx: the smallest that holds the tokenizer's ids."""
        return token_dtype(self.tokenizer.id_count)

    def options(self) -> dict:
        """The options that decide the output's bytes (recorded, and compared on rerun)."""
        return {
            "corpus": self.corpus,
            "record_format": {"type": type(self.fmt).__name__, **vars(self.fmt)},
            "on_error": self.on_error,
            "split": list(self.split) if self.split else None,
            "append_eod": True,
            "dtype": self.dtype().name,
        }

    def fingerprint(self, *, as_given: bool = False) -> str:
        """What makes this job's output: its options, its input, the tokenizer. An input file is
        named by its real path, so that another spelling of it is the same input (`as_given`: by
        the path as given, as zerolab 0.1.0's manifests before 2026-11-26 name it)."""
        source = self.source.describe()
        if not as_given:
            source = {**source, "files": [_real(file) for file in source.get("files", [])]}
        facts = {"options": self.options(), "source": source, "tokenizer": self.tokenizer.facts()}
        return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def _real(file: dict) -> dict:
    """A file's facts (sources.file_facts) with its path resolved (links, `..`, relative)."""
    return {**file, "path": os.path.realpath(file["path"])} if "path" in file else file


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


@dataclass
class Pending:
    """A job to run: its outputs, fingerprint and work folder; once its input is read, its counts
    (and those it resumed from) and the seconds reading took."""

    job: PrepJob
    outputs: dict[str, Path]
    fingerprint: str
    workdir: Path
    counts: Counts | None = None
    before: Counts | None = None
    seconds: float = 0.0


def run(*jobs: PrepJob) -> int:
    """Prepare the corpora of `jobs` (one, or one per split of a dataset that comes split); returns the
    exit status (0, or 2 through UserError). All or nothing: every job's output is checked before any
    input is read, every input is read into its job's shards before any output is made, and the
    outputs are moved into place together, their manifests last. A refused run leaves nothing; an
    interrupted one no output, only the finished shards of `PREFIX.partial/` for the same command to
    resume from."""
    pending = []
    for job in jobs:
        outputs, fingerprint = job.outputs(), job.fingerprint()
        if _finished(outputs, {fingerprint, job.fingerprint(as_given=True)}, job.force):
            _say(job, f"[green]already prepared[/]: {', '.join(f'{p}.bin' for p in outputs.values())} "
                 "(pass --force to rebuild)")  # fmt: skip
            continue
        workdir = Path(f"{job.out}{SUFFIX}.partial")
        _check_outputs(outputs, workdir)
        pending.append(Pending(job, outputs, fingerprint, workdir))
    if not pending:
        return 0
    workdirs = [item.workdir for item in pending]
    with contextlib.ExitStack() as stack:
        for folder in dict.fromkeys(workdir.parent for workdir in workdirs):
            enter_output_folder(stack, folder)
        try:
            for item in pending:
                _read(item)
            facts = _merge(pending)
        except KeyboardInterrupt:
            _forget_unfinished(workdirs)
            raise Interrupted(_kept(workdirs)) from None
        except UserError:  # a refused input: the command must change, no shard is worth keeping
            for workdir in workdirs:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        except BaseException:
            _forget_unfinished(workdirs)
            raise
    for item, job_facts in zip(pending, facts, strict=True):
        shutil.rmtree(item.workdir)
        _summary(item.job, item.counts, item.before, job_facts, item.seconds)
    return 0


def _read(item: Pending) -> None:
    """Read the job's input into the shards of its work folder (resuming after those finished);
    UserError when it would write no document, or leave a split empty."""
    job, workdir = item.job, item.workdir
    started = time.perf_counter()
    if job.force:
        shutil.rmtree(workdir, ignore_errors=True)
    done, counts, position = _resume_point(job, workdir, item.fingerprint)
    item.before = Counts(counts.records, counts.input_bytes, dict(counts.documents), dict(counts.tokens))
    item.counts = _process(job, workdir, done, counts, position, item.outputs)
    refusal = _empty_output(job, item.counts)
    if refusal:
        raise UserError(refusal)
    item.seconds = time.perf_counter() - started


def enter_output_folder(stack: contextlib.ExitStack, folder: Path) -> None:
    """Enter files.folders_made(`folder`) on `stack` (the folders made are removed again when the
    block fails); a folder that cannot be made is a UserError naming it."""
    try:
        stack.enter_context(folders_made(folder))
    except OSError as error:
        raise UserError(
            f"--out: cannot make the folder {error.filename or folder} ({error.strerror}); choose an --out "
            "in a folder you can write to"
        ) from None


def _forget_unfinished(workdirs: list[Path]) -> None:
    """Remove the work folders without a finished shard: nothing to resume from."""
    for workdir in workdirs:
        if not any(workdir.glob("*.done.json")):
            shutil.rmtree(workdir, ignore_errors=True)


def _kept(workdirs: list[Path]) -> str:
    """What Ctrl-C left: that the same command resumes, and from what."""
    kept = {workdir: len(list(workdir.glob("*.done.json"))) for workdir in workdirs if workdir.is_dir()}
    detail = ", ".join(
        f"{count} finished shard{'s' if count != 1 else ''} kept in {workdir}"
        for workdir, count in kept.items()
    )
    return (
        "run the same command again to resume "
        f"({detail or 'no shard had finished: it starts from the beginning'})"
    )


def _check_outputs(outputs: dict[str, Path], workdir: Path) -> None:
    """UserError when an output file's path is taken by a directory, or its folder (or the work folder
    of its shards) by a file."""
    if workdir.exists() and not workdir.is_dir():
        raise UserError(
            f"--out: {workdir} is a file, where the run keeps its resumable shards; move it or "
            "choose another --out"
        )
    for prefix in outputs.values():
        for suffix in (".bin", ".idx", ".manifest.json"):
            path = Path(f"{prefix}{suffix}")
            if path.is_dir():
                raise UserError(
                    f"--out: {path} is a directory, where the output file goes; move it or choose --out"
                )
        check_folder(prefix.parent, "a folder of the output")


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


def _finished(outputs: dict[str, Path], fingerprints: set[str], force: bool) -> bool:
    """Whether a complete output of this very job exists (then a rerun is a no-op); UserError when
    any of its outputs is there from another input or options, or no longer matches its manifest
    (without --force: nothing is overwritten that this job did not make)."""
    if force:
        return False
    complete = True
    for prefix in outputs.values():
        manifest_path = Path(f"{prefix}.manifest.json")
        if not manifest_path.is_file():
            complete = False
            continue
        try:
            manifest = json.loads(manifest_path.read_text())
            files = manifest["files"]
            made = manifest["fingerprint"], files["bin"]["bytes"], files["idx"]["bytes"]
        except (ValueError, KeyError, TypeError):
            raise UserError(
                f"{manifest_path} is not a manifest of `zerolab prep`; pass --force to rebuild {prefix}, or "
                "choose another --out"
            ) from None
        if made[0] not in fingerprints:
            raise UserError(
                f"{prefix}.bin exists, made from another input or with other options "
                f"(see {manifest_path}); pass --force to rebuild it, or choose another --out"
            )
        intact = all(
            Path(f"{prefix}.{ext}").is_file() and Path(f"{prefix}.{ext}").stat().st_size == size
            for ext, size in zip(("bin", "idx"), made[1:], strict=True)
        )
        if not intact:
            raise UserError(f"{prefix}.bin/.idx do not match {manifest_path}; pass --force to rebuild them")
    return complete


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
    job.tokenizer.load()  # built once here, inherited by the forked workers
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with multiprocessing.get_context(method).Pool(job.workers, initializer=_worker_start) as pool:
        pending: deque = deque()
        for batch, position, nbytes in batches:
            pending.append(
                (
                    pool.apply_async(encode_batch, (batch, job.fmt, job.on_error, dtype, job.tokenizer)),
                    position,
                    nbytes,
                )
            )
            if len(pending) > 2 * job.workers:
                result, position, nbytes = pending.popleft()
                yield result.get(), position, nbytes
        while pending:
            result, position, nbytes = pending.popleft()
            yield result.get(), position, nbytes


def _worker_start() -> None:
    """A worker leaves Ctrl-C to the main process, which stops the workers and says how to resume."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _process(job: PrepJob, workdir: Path, done: int, counts: Counts, position: dict, outputs: dict) -> Counts:
    names = list(outputs)
    for name in names:
        counts.documents.setdefault(name, 0)
        counts.tokens.setdefault(name, 0)
    dtype = job.dtype().name
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


def _merge(pending: list[Pending]) -> list[dict]:
    """Concatenate each job's shards into its outputs' `.bin.tmp`/`.idx.tmp`, then move them all into
    place and write the manifests last; the facts of each job's outputs, in order."""
    made: dict[Path, dict] = {}  # output prefix -> its files, their .tmp written
    try:
        for item in pending:
            for name, prefix in item.outputs.items():
                made[prefix] = _merge_output(
                    item.workdir, name, prefix, item.counts.documents[name], item.job.dtype()
                )
    except BaseException:
        for prefix in made:
            for ext in ("bin", "idx"):
                Path(f"{prefix}.{ext}.tmp").unlink(missing_ok=True)
        raise
    for prefix in made:
        Path(f"{prefix}.manifest.json").unlink(missing_ok=True)  # an output without one is unfinished
        for ext in ("bin", "idx"):
            os.replace(f"{prefix}.{ext}.tmp", f"{prefix}.{ext}")
    facts = []
    for item in pending:
        for name, prefix in item.outputs.items():
            manifest = _manifest(item.job, name, item.counts, made[prefix], item.fingerprint)
            write_json_atomic(Path(f"{prefix}.manifest.json"), manifest)
        facts.append({name: (prefix, made[prefix]) for name, prefix in item.outputs.items()})
    return facts


def _merge_output(workdir: Path, name: str, prefix: Path, documents: int, dtype: np.dtype) -> dict:
    """Write the `name` split of the shards in `workdir` as `prefix.bin.tmp` and `prefix.idx.tmp`; the
    manifest's facts of the two files."""
    shards = sorted(workdir.glob("shard-*.done.json"))
    bin_tmp, idx_tmp = Path(f"{prefix}.bin.tmp"), Path(f"{prefix}.idx.tmp")
    try:
        digest = hashlib.sha256()
        with open(bin_tmp, "wb") as out:
            for marker in shards:
                with open(workdir / marker.name.replace("done.json", f"{name}.bin"), "rb") as part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)

        def size_chunks():
            for marker in shards:
                yield np.fromfile(workdir / marker.name.replace("done.json", f"{name}.sizes"), dtype="<i4")

        write_index(idx_tmp, size_chunks, documents, dtype)
    except BaseException:
        bin_tmp.unlink(missing_ok=True)
        idx_tmp.unlink(missing_ok=True)
        raise
    return {
        "bin": {"name": f"{prefix.name}.bin", "bytes": bin_tmp.stat().st_size, "sha256": digest.hexdigest()},
        "idx": {"name": f"{prefix.name}.idx", "bytes": idx_tmp.stat().st_size, "sha256": sha256_of(idx_tmp)},
    }


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


def manifest_tokenizer_facts(prefix: str | Path) -> dict | None:
    """The tokenizer facts of the dataset's manifest at `prefix` (Tokenizer.facts), None without a
    readable one."""
    try:
        facts = json.loads(Path(f"{prefix}.manifest.json").read_text())["tokenizer"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return facts if isinstance(facts, dict) else None


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
        "dtype": job.dtype().name,
        "tokenizer": job.tokenizer.facts(with_path=True),
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
