"""What a launch script really runs: the script is run in a scratch copy of its folder with stub
launchers first on PATH (deepspeed, torchrun, python, srun, mpirun) that record the
`pretrain_gpt.py` arguments, the launcher's own and the DeepSpeed config file they name, and stub
cluster tools (nvidia-smi: `gpus` GPUs a node, ds_ssh, ssh, wget, pip) so that the script runs at
its defaults on any machine. Absolute paths outside the system's folders (/blob, /vc_data...) are
moved under the scratch folder, so the script writes nothing outside it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerolab.errors import UserError

SYSTEM_FOLDERS = ("bin", "dev", "etc", "lib", "lib64", "proc", "sbin", "sys", "tmp", "usr", "run")
"""Top-level folders a script's absolute paths keep (/dev/null, /usr/bin/env); any other is moved."""

_ABSOLUTE = re.compile(r"(?<=[=\"' (])/(?!(?:" + "|".join(SYSTEM_FOLDERS) + r")\b)(?=[A-Za-z_])")

_MISSING = re.compile(r"line \d+: ([^:\n]+): No such file or directory")
"""bash's complaint about a redirection into a folder that does not exist."""

_RECORDER = """#!{python}
import json, os, sys, time
argv = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
config = None
for index, token in enumerate(argv):
    name, equals, value = token.partition("=")
    if name in ("--deepspeed_config", "--deepspeed-config"):
        path = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
        try:
            with open(path) as handle:
                config = handle.read()
        except OSError:
            config = None
if argv[0].startswith("python") and not any(a.endswith("pretrain_gpt.py") for a in argv):
    sys.exit(0)
out = os.environ["ZEROLAB_CAPTURE_DIR"]
name = os.path.join(out, "%f-%d.json" % (time.time(), os.getpid()))
with open(name, "w") as handle:
    json.dump({{"argv": argv, "cwd": os.getcwd(), "ds_config": config}}, handle)
"""

_STUBS = {
    "nvidia-smi": 'for i in $(seq 1 "${ZEROLAB_CAPTURE_GPUS}"); do echo "NVIDIA GPU"; done\n',
    "ds_ssh": 'bash -c "$*"; echo; echo\n',
    "ssh": "exit 1\n",
    "pdsh": "exit 0\n",
    "pip": "exit 0\n",
    "wget": (
        'out=""; prev=""; for a in "$@"; do [ "$prev" = "-O" ] && out="$a"; prev="$a"; last="$a"; done\n'
        '[ -n "$out" ] || out="$(basename "$last")"; : > "$out"\n'
    ),
}


@dataclass
class Captured:
    """One launch a script made: the launcher's argv up to pretrain_gpt.py, the arguments after it,
    the DeepSpeed config it names (parsed; None when there is none or it is not JSON) and the
    config's text."""

    launcher: list[str]
    args: list[str]
    ds_config: dict[str, Any] | None
    ds_config_text: str | None = None
    notes: list[str] = field(default_factory=list)


def capture_script(script: Path, *, root: Path, gpus: int = 8, timeout_s: float = 60) -> list[Captured]:
    """The launches `script` (a file under `root`, e.g. an engine checkout's examples_deepspeed
    script) makes when run at its defaults on one node of `gpus` GPUs; [] when it launches nothing."""
    script = script.resolve()
    root = root.resolve()
    relative = script.relative_to(root)
    with tempfile.TemporaryDirectory(prefix="zerolab-capture-") as scratch:
        base = Path(scratch)
        copy = base / "tree"
        top = relative.parts[0]
        if (root / top).is_dir():
            shutil.copytree(root / top, copy / top, symlinks=True)
        else:
            copy.mkdir()
            shutil.copy(root / top, copy / top)
        for name in ("pretrain_gpt.py",):
            if (root / name).is_file():
                shutil.copy(root / name, copy / name)
        for path in [copy / top] if relative == Path(top) else (copy / top).rglob("*.sh"):
            text = path.read_text(errors="replace")
            path.write_text(_ABSOLUTE.sub(f"{base}/abs/", text))
        stubs = base / "stubs"
        stubs.mkdir()
        recorder = _RECORDER.format(python=sys.executable)
        for name in ("deepspeed", "torchrun", "python", "python3", "srun", "mpirun"):
            (stubs / name).write_text(recorder)
        for name, body in _STUBS.items():
            (stubs / name).write_text("#!/usr/bin/env bash\n" + body)
        for path in stubs.iterdir():
            path.chmod(0o755)
        out = base / "captured"
        out.mkdir()
        home = base / "home"
        home.mkdir()
        env = {
            "PATH": f"{stubs}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(home),
            "USER": "user",
            "HOSTNAME": "node0",
            "LANG": "C.UTF-8",
            "ZEROLAB_CAPTURE_DIR": str(out),
            "ZEROLAB_CAPTURE_GPUS": str(gpus),
        }
        for _ in range(8):  # a folder the script writes into but expects to exist: made, then run again
            try:
                run = subprocess.run(
                    ["bash", str(copy / relative)],
                    cwd=copy / relative.parent,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise UserError(
                    f"{script}: still running after {timeout_s:.0f} s with stub launchers"
                ) from None
            missing = _MISSING.findall(run.stderr)
            if any(out.iterdir()) or not missing:
                break
            for path in missing:
                (copy / relative.parent / path).parent.mkdir(parents=True, exist_ok=True)
        return [_captured(json.loads(path.read_text()), base) for path in sorted(out.iterdir())]


def _captured(record: dict[str, Any], base: Path) -> Captured:
    argv = [token.replace(f"{base}/", "/") for token in record["argv"]]
    script = next((i for i, token in enumerate(argv) if token.endswith("pretrain_gpt.py")), None)
    launcher, args = (argv, []) if script is None else (argv[: script + 1], argv[script + 1 :])
    text = record["ds_config"]
    config = None
    notes = []
    if text is not None:
        try:
            config = json.loads(text)
        except json.JSONDecodeError as error:
            notes.append(f"the DeepSpeed config is not JSON: {error}")
    return Captured(launcher=launcher, args=args, ds_config=config, ds_config_text=text, notes=notes)
