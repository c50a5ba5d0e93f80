"""zerolab's workarounds for the pinned engine: each named and explained, each doing what it
says: on stand-in packages shaped like the engine's (always), and on the real engine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from zerolab.engine.paths import REPO_ROOT
from zerolab.engine.workarounds import WORKAROUNDS

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


def run_with_standins(tmp_path: Path, code: str, files: dict[str, str] = STANDIN_FILES) -> str:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    prelude = "from zerolab.engine.workarounds import apply_all\napply_all()\n"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"}
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_workaround_is_named_and_explained_in_one_line():
    names = [w.name for w in WORKAROUNDS]
    assert names == ["lazy_vision_import", "missing_compression_module", "contiguous_attention_inputs"]
    for workaround in WORKAROUNDS:
        assert workaround.why and "\n" not in workaround.why and len(workaround.why) < 110


def test_vision_module_loads_only_when_called(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        from megatron.model.vision.knn_monitor import compute_feature_bank
        print("imported")
        try:
            compute_feature_bank(None)
        except ModuleNotFoundError as error:
            print("called:", error.name)
        """,
    )
    assert out.split("\n")[:2] == ["imported", "called: torchvision_that_does_not_load"]


def test_missing_compression_module_is_provided_and_says_why_when_used(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        from deepspeed.compression.compress import init_compression, redundancy_clean
        try:
            init_compression(None, {}, None)
        except RuntimeError as error:
            print(error)
        """,
    )
    assert "removed in 0.19.7" in out and "deepspeed<=0.19.6" in out


def test_an_existing_compression_module_is_left_alone(tmp_path):
    files = {
        **STANDIN_FILES,
        "deepspeed/compression/compress.py": "def init_compression(*a):\n    return 'real'\n",
    }
    out = run_with_standins(
        tmp_path,
        "from deepspeed.compression.compress import init_compression\nprint(init_compression())",
        files,
    )
    assert out.strip() == "real"


def test_attention_inputs_are_made_contiguous(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        class Strided:
            def __init__(self, contiguous=False):
                self.contiguous_ = contiguous
            def is_contiguous(self):
                return self.contiguous_
            def contiguous(self):
                return Strided(True)
        from megatron.model.transformer import CoreAttention
        print(CoreAttention().forward(Strided(), Strided(), Strided(), "mask"))
        """,
    )
    assert out.strip() == "('attended', 'mask')"


def test_real_engine_imports_with_the_workarounds(engine):
    engine_dir, python = engine
    code = textwrap.dedent(
        f"""
        import sys
        from zerolab.engine.workarounds import apply_all
        apply_all()
        sys.path.insert(0, {str(engine_dir)!r})
        import megatron.training, megatron.model.transformer as transformer
        import deepspeed.compression.compress as compress
        knn_monitor = sys.modules["megatron.model.vision.knn_monitor"]
        print("torchvision" in sys.modules, type(knn_monitor.__spec__.loader).__name__)
        print(compress.__file__.endswith("deepspeed/compression/compress.py"))
        print(transformer.CoreAttention.forward.__name__)
        """
    )
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:3] == ["False _StubFinder", "True", "contiguous_forward"]
