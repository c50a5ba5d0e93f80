"""apex for the engine on CUDA (zerolab.engine.apex), as far as a machine without CUDA can
check it: the extensions built are exactly the compiled modules the real engine imports
(besides its own fused kernels), an environment that has them builds nothing (the GPU image's
case), and one that cannot build them says why before fetching anything. The build itself
needs nvcc and is not run here."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from zerolab.engine import fused_kernels
from zerolab.engine.apex import EXTENSIONS
from zerolab.engine.paths import engine_python_env
from zerolab.engine.pins import load_pins
from zerolab.locations import REPO_ROOT

COMPILED_IMPORT = re.compile(r"^\s*import (\w+_cuda|amp_C)\b|import_module\(\"(\w+_cuda)\"\)", re.MULTILINE)


def test_the_extensions_built_are_the_compiled_modules_the_engine_imports(engine):
    engine_dir, _ = engine
    imported = {
        name
        for path in (engine_dir / "megatron").rglob("*.py")
        for match in COMPILED_IMPORT.finditer(path.read_text(errors="replace"))
        for name in match.groups()
        if name
    }
    assert imported == set(EXTENSIONS) | set(fused_kernels.KERNELS)


def build_apex(python: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "zerolab.engine.build", "apex", "--workdir", str(tmp_path / "work")],
        env={**engine_python_env(), "PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )


def test_an_environment_with_apex_builds_nothing(engine, tmp_path):
    present = tmp_path / "site"  # modules by those names, as the NGC image's apex provides them
    (present / "apex").mkdir(parents=True)
    (present / "apex" / "__init__.py").write_text("")
    for name in EXTENSIONS:
        (present / f"{name}.py").write_text("")
    result = build_apex(engine[1], tmp_path, PYTHONPATH=f"{REPO_ROOT}{os.pathsep}{present}")
    assert result.returncode == 0, result.stderr
    assert "already importable; nothing built" in result.stdout
    assert not (tmp_path / "work").exists()


def test_without_a_cuda_torch_apex_is_refused_before_anything_is_fetched(engine, tmp_path):
    result = build_apex(engine[1], tmp_path, ZEROLAB_APEX_SRC=str(tmp_path / "no-such-apex"))
    assert result.returncode == 2
    torch = load_pins().python["torch"]
    assert (
        f"zerolab: error: apex's CUDA extensions need a CUDA build of torch; this one is {torch}"
        in result.stderr
    )
    assert not (tmp_path / "work").exists()
