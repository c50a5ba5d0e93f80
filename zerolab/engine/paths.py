"""Where the engine lives on this machine: a cache directory outside the repository.

`ZEROLAB_HOME` (default `~/.cache/zerolab`) holds the engine's virtual environment
(`venv/`), DeepSpeed's JIT-built ops (`torch_extensions/`), its Megatron-DeepSpeed
checkout (`engine/Megatron-DeepSpeed-<commit>/`, which must stay writable: Megatron
compiles its data helpers inside it), apex's source at its pinned commit (`apex/`, fetched
only on a CUDA machine whose environment lacks apex) and the record of what `zerolab engine
install` set up (`install.json`).
`ZEROLAB_ENGINE_DIR` and `ZEROLAB_ENGINE_PYTHON` point elsewhere, e.g. in the image.
"""

from __future__ import annotations

import os
from pathlib import Path

from zerolab.engine.pins import load_pins
from zerolab.locations import CHECKOUT


def engine_python_env() -> dict[str, str]:
    """This environment for the engine's Python (or another interpreter zerolab starts), as a
    launch's ranks have it: without PYTHONPATH and PYTHONHOME (it sees only its own packages), the
    engine's bin directory first on PATH (DeepSpeed builds its ops with the `ninja` found there:
    another ninja version keeps another build log, and rebuilds everything) and zerolab's build
    caches (engine_caches)."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{engine_bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    return env | engine_caches()


def zerolab_on_path(*first: Path) -> dict[str, str]:
    """PYTHONPATH for a zerolab.rank script the host starts in the engine's Python: `first` (the
    engine checkout, whose classes checkpoints pickle), then this checkout, so that the script
    imports the zerolab (its contracts) that started it, as every launch's ranks do; without a
    checkout (zerolab installed), the engine environment's own."""
    path = [*first, *([CHECKOUT] if CHECKOUT is not None else [])]
    return {"PYTHONPATH": os.pathsep.join(map(str, path))} if path else {}


def zerolab_home() -> Path:
    """The cache directory for the engine (`ZEROLAB_HOME`, default `~/.cache/zerolab`)."""
    return Path(os.environ.get("ZEROLAB_HOME", "~/.cache/zerolab")).expanduser()


def engine_dir() -> Path:
    """The Megatron-DeepSpeed checkout at the pinned commit."""
    override = os.environ.get("ZEROLAB_ENGINE_DIR")
    if override:
        return Path(override).expanduser()
    return zerolab_home() / "engine" / f"Megatron-DeepSpeed-{load_pins().engine_commit[:12]}"


def engine_python() -> Path:
    """The Python interpreter of the engine's environment."""
    override = os.environ.get("ZEROLAB_ENGINE_PYTHON")
    if override:
        return Path(override).expanduser()
    return zerolab_home() / "venv" / "bin" / "python"


def engine_bin_dir() -> Path:
    """The engine environment's bin directory: where `torchrun` and `deepspeed` live."""
    return engine_python().parent


def torch_extensions_dir() -> Path:
    """Where DeepSpeed JIT-builds its C++ ops for the engine (TORCH_EXTENSIONS_DIR at launch):
    zerolab's own, so that other torch programs on the machine neither rebuild nor replace them."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or zerolab_home() / "torch_extensions")


def engine_caches() -> dict[str, str]:
    """The environment that points the engine's builds at zerolab's folders, as every launch and
    engine process has it: DeepSpeed's JIT-built ops (TORCH_EXTENSIONS_DIR) and torch.compile's
    kernels (TORCHINDUCTOR_CACHE_DIR: speed.compiled_layers compiles a layer once per machine, later
    launches load it)."""
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(zerolab_home() / "torchinductor")
    return {"TORCH_EXTENSIONS_DIR": str(torch_extensions_dir()), "TORCHINDUCTOR_CACHE_DIR": inductor}


def cuda_link_dir() -> Path:
    """Unversioned names of a pip-installed CUDA toolkit's libraries (zerolab.engine.cuda.link_libraries)."""
    return zerolab_home() / "cuda-lib"


def install_record() -> Path:
    """The JSON record of what `zerolab engine install` set up last."""
    return zerolab_home() / "install.json"


def engine_missing() -> str | None:
    """Why the engine cannot run here, or None when it can."""
    if not (engine_dir() / "pretrain_gpt.py").is_file():
        return f"no Megatron-DeepSpeed checkout at {engine_dir()} (run: make setup)"
    if not engine_python().is_file():
        return f"no engine environment at {engine_python()} (run: make setup)"
    return None
