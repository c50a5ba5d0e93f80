"""Running one of zerolab's standalone scripts (zerolab.rank's hf_gpt2.py, score_hf.py, ...) in the
engine's Python, where torch, transformers and DeepSpeed live: the script reads a request JSON and
says why it failed on a stderr line `zerolab NAME: ...`, which becomes the UserError."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from zerolab.contracts import HOST_HUGE_PAGES_ENV, REQUEST_FILE, error_prefix
from zerolab.engine.paths import engine_dir, engine_missing, engine_python, engine_python_env, zerolab_on_path
from zerolab.errors import UserError

KEPT_STDERR = 20_000
"""Characters of the script's stderr kept for the error message."""


def run_engine_script(
    script: Path,
    request: dict[str, Any],
    work: Path,
    *,
    name: str,
    engine_path: bool = False,
    echo: bool = False,
) -> None:
    """Run `script` with `request` (written to `work`/request.json, removed after) on CPU. With
    `engine_path`, the Megatron-DeepSpeed checkout is importable (its checkpoints pickle its classes);
    with `echo`, the script's stderr (its progress bars) shows as it runs. UserError when the
    engine is not set up or the script fails, with the reason it printed."""
    missing = engine_missing()
    if missing:
        raise UserError(f"zerolab {name} runs in the engine's Python (torch, transformers): {missing}")
    request_file = work / REQUEST_FILE
    request_file.write_text(json.dumps(request))
    env = engine_python_env() | zerolab_on_path(*([engine_dir()] if engine_path else []))
    # on CPU, with torch's large tensors (logits, checkpoints' weights) on huge pages, as a CPU recipe's
    # ranks: zerolab eval of WikiText's and HellaSwag's samples spent 1.5 s in the kernel instead of 3.4
    env |= {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", HOST_HUGE_PAGES_ENV: "1"}
    process = subprocess.Popen(
        [str(engine_python()), str(script), str(request_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    said = ""
    prefix = error_prefix(name)
    shown = _Echo(prefix)
    assert process.stderr is not None
    # a character split between two reads is decoded whole, with the read that completes it
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while raw := os.read(process.stderr.fileno(), 4096):
        chunk = decoder.decode(raw)
        if echo:
            sys.stderr.write(shown.text(chunk))
            sys.stderr.flush()
        said = (said + chunk)[-KEPT_STDERR:]
    if echo:
        sys.stderr.write(shown.rest())
    code = process.wait()
    request_file.unlink()
    if code != 0:
        raise UserError(script_failure(said, name) or "the engine's Python exited without a word")


def engine_json(script: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """The last stdout line of `script ARGS` run by the engine's Python with the engine checkout and
    this zerolab importable (`env`: the environment it starts from, default engine_python_env()),
    read as JSON; RuntimeError with the end of its stderr where it fails."""
    env = (engine_python_env() if env is None else env) | zerolab_on_path(engine_dir())
    done = subprocess.run([str(engine_python()), str(script), *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def script_failure(stderr: str, name: str) -> str | None:
    """Why a script of zerolab's in the engine's Python failed, from its `stderr`: its last
    `zerolab NAME: ...` line (without the prefix), else its last line; None when it said nothing."""
    lines = [line.strip() for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    prefix = error_prefix(name)
    own = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
    return own[-1] if own else (lines[-1] if lines else None)


class _Echo:
    """The script's stderr as it comes, less its own `zerolab NAME: ...` lines: those say why it failed,
    which the UserError prints (once). A line that may still become one is held until it ends."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.held = ""
        self.line_start = True

    def text(self, chunk: str) -> str:
        """What of `chunk` (and of what was held) to show now."""
        text, self.held, shown = self.held + chunk, "", []
        while text:
            if self.line_start and (text.startswith(self.prefix) or self.prefix.startswith(text)):
                end = min((i for i in (text.find("\n"), text.find("\r")) if i >= 0), default=-1)
                if end < 0:
                    self.held = text  # the script's own line, or the start of one: wait for its end
                    break
                text = text[end + 1 :]  # its own line: dropped
                continue
            end = min((i for i in (text.find("\n"), text.find("\r")) if i >= 0), default=len(text) - 1)
            shown.append(text[: end + 1])
            self.line_start = text[end] in "\r\n"
            text = text[end + 1 :]
        return "".join(shown)

    def rest(self) -> str:
        """What is still held when the script has ended: shown, unless it is the script's own line."""
        held, self.held = self.held, ""
        return "" if held.startswith(self.prefix) else held
