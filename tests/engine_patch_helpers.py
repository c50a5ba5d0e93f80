"""Running code under what every rank applies before the training script (the workarounds and the
opt-in patches its environment asks for): on stand-in packages shaped like the engine's, on the
real engine, or through megatron_entry itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from zerolab.backends.local import free_port
from zerolab.engine.paths import engine_python_env, zerolab_on_path
from zerolab.locations import REPO_ROOT
from zerolab.rank.megatron_entry import OPT_IN_ENV

APPLY_LAUNCH_PATCHES = (
    "from zerolab.rank.import_hooks import apply_wanted\n"
    "from zerolab.rank.megatron_entry import LAUNCH_PATCHES\n"
)

STANDIN_FILES = {
    "megatron/__init__.py": "",
    "megatron/model/__init__.py": "",
    "megatron/model/vision/__init__.py": "",
    # The real knn_monitor imports torchvision, which does not load beside the CPU torch wheel.
    "megatron/model/vision/knn_monitor.py": "import torchvision_that_does_not_load\n",
    "megatron/model/transformer.py": textwrap.dedent(
        """
        class CoreAttention:
            def forward(self, query, key, value, mask):
                for tensor in (query, key, value):
                    assert tensor.is_contiguous(), "view() on a non-contiguous tensor"
                return "attended", mask
        """
    ),
    "deepspeed/__init__.py": "",
    "deepspeed/compression/__init__.py": "",  # no compress.py: as in DeepSpeed >= 0.19.7
}


def run_with_standins(
    tmp_path: Path, code: str, files: dict[str, str] = STANDIN_FILES, **env_vars: str
) -> str:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    prelude = f"{APPLY_LAUNCH_PATCHES}applied = apply_wanted(LAUNCH_PATCHES)\n"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}", **env_vars}
    for name in OPT_IN_ENV:
        if name not in env_vars:
            env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_on_engine(engine: tuple[Path, Path], code: str, *args: str, **env: str) -> str:
    """stdout of `code` run by the engine's Python with what megatron_entry applies (DS_ACCELERATOR=cpu),
    `args` its sys.argv[1:]."""
    engine_dir, python = engine
    prelude = (
        f"import sys\n{APPLY_LAUNCH_PATCHES}apply_wanted(LAUNCH_PATCHES)\n"
        f"sys.path.insert(0, {str(engine_dir)!r})\n"
    )
    full_env = {**engine_python_env(), "DS_ACCELERATOR": "cpu", **zerolab_on_path(), **env}
    result = subprocess.run(
        [str(python), "-c", prelude + textwrap.dedent(code), *args],
        env=full_env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def run_entry(tmp_path: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess:
    """`python -m zerolab.rank.megatron_entry SCRIPT ARGS` for a script that prints `trained`."""
    script = tmp_path / "pretrain.py"
    script.write_text("print('trained')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLAB_")}
    env |= {"PYTHONPATH": str(REPO_ROOT), "RANK": "0", **env_vars}
    return subprocess.run(
        [sys.executable, "-m", "zerolab.rank.megatron_entry", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )


def one_rank_env() -> dict[str, str]:
    """The environment of a one-rank torch.distributed job on this machine (a free port)."""
    return {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
