"""NVIDIA apex for the engine on CUDA. Megatron-DeepSpeed imports apex's fused layer norm and
FusedAdam (the `apex` package with its extensions `fused_layer_norm_cuda` and `amp_C`, which
also serves multi-tensor apply) and the gradient-accumulation fusion kernel
(`fused_weight_gradient_mlp_cuda`); nothing else of apex's two dozen extensions.

`ensure` leaves an environment whose apex has them all alone (the NGC image ships one), and
otherwise builds a wheel of the apex package with exactly those three extensions from the
commit pins.toml pins, for TORCH_CUDA_ARCH_LIST, and installs it. Run by the engine's own Python
(`python -m zerolab.engine.build apex`); standard library at module level.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from zerolab.engine.checkout import ensure_checkout
from zerolab.engine.cuda import ARCH_LIST_VARIABLE
from zerolab.engine.pins import load_pins
from zerolab.errors import UserError

APEX_SRC_VARIABLE = "ZEROLAB_APEX_SRC"
"""A local git directory (bare or a checkout) to take apex from instead of upstream."""

_HALF_FLAGS = (
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
)
EXTENSIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "amp_C": (
        (
            "csrc/amp_C_frontend.cpp",
            "csrc/multi_tensor_sgd_kernel.cu",
            "csrc/multi_tensor_scale_kernel.cu",
            "csrc/multi_tensor_axpby_kernel.cu",
            "csrc/multi_tensor_l2norm_kernel.cu",
            "csrc/multi_tensor_l2norm_kernel_mp.cu",
            "csrc/multi_tensor_l2norm_scale_kernel.cu",
            "csrc/multi_tensor_lamb_stage_1.cu",
            "csrc/multi_tensor_lamb_stage_2.cu",
            "csrc/multi_tensor_adam.cu",
            "csrc/multi_tensor_adagrad.cu",
            "csrc/multi_tensor_novograd.cu",
            "csrc/multi_tensor_lamb.cu",
            "csrc/multi_tensor_lamb_mp.cu",
            "csrc/update_scale_hysteresis.cu",
        ),
        ("-lineinfo", "-O3", "--use_fast_math"),
    ),
    "fused_layer_norm_cuda": (
        ("csrc/layer_norm_cuda.cpp", "csrc/layer_norm_cuda_kernel.cu"),
        ("-maxrregcount=50", "-O3", "--use_fast_math"),
    ),
    "fused_weight_gradient_mlp_cuda": (
        (
            "csrc/megatron/fused_weight_gradient_dense.cpp",
            "csrc/megatron/fused_weight_gradient_dense_cuda.cu",
            "csrc/megatron/fused_weight_gradient_dense_16bit_prec_cuda.cu",
        ),
        ("-O3", *_HALF_FLAGS, "--use_fast_math"),
    ),
}
"""Each extension's sources in the apex tree and its nvcc flags, as apex's own setup.py builds
it with --cuda_ext (at the pinned commit). amp_C's frontend binds every one of its kernels."""

APEX_MODULES = ("apex", *EXTENSIONS)
"""What Megatron-DeepSpeed imports of apex on CUDA: the package and its three extensions."""


def missing_modules(names: tuple[str, ...] = APEX_MODULES) -> list[str]:
    """The modules among `names` this Python cannot find (nothing is imported: no GPU needed)."""
    importlib.invalidate_caches()
    return [name for name in names if importlib.util.find_spec(name) is None]


def ensure(workdir: Path) -> str:
    """Leave apex's modules importable: as they are when present, else built from pins.toml's
    commit (fetched into `workdir`, or from ZEROLAB_APEX_SRC) and installed. Says which."""
    missing = missing_modules()
    if not missing:
        return f"apex: {', '.join(APEX_MODULES)} already importable; nothing built"
    pins = load_pins()
    print(
        f"apex: {', '.join(missing)} missing; building apex {pins.apex_commit[:12]}'s extensions", flush=True
    )
    _check_toolchain()
    source = os.environ.get(APEX_SRC_VARIABLE) or pins.apex_repo
    tree = workdir / f"apex-{pins.apex_commit[:12]}"
    ensure_checkout(tree, pins.apex_commit, source, what="apex", variable=APEX_SRC_VARIABLE)
    with tempfile.TemporaryDirectory(prefix="zerolab-apex-") as scratch:
        wheel = build_wheel(tree, Path(scratch), pins.apex_commit[:12])
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--force-reinstall",
                "--no-index",
                str(wheel),
            ]
        )
    still = _missing_in_a_new_process()
    if still:
        raise UserError(f"apex was built and installed, but {', '.join(still)} still cannot be found")
    return (
        f"apex: built {', '.join(EXTENSIONS)} for {ARCH_LIST_VARIABLE}={os.environ.get(ARCH_LIST_VARIABLE)}"
    )


def build_wheel(tree: Path, out: Path, label: str) -> Path:
    """A wheel of the apex package in `tree` with the extensions of EXTENSIONS, built for
    TORCH_CUDA_ARCH_LIST into `out`; its version is `0.1+zerolab.LABEL`."""
    # setuptools, torch here, not at the top: only for the apex build, in the engine's environment
    from setuptools import find_packages, setup
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    absent = [path for sources, _ in EXTENSIONS.values() for path in sources if not (tree / path).is_file()]
    if absent:
        raise UserError(f"{tree}: not the apex tree zerolab builds from (missing {', '.join(absent)})")
    extensions = [
        CUDAExtension(
            name,
            list(sources),
            include_dirs=[str(tree / "csrc")],
            extra_compile_args={"cxx": ["-O3"], "nvcc": list(flags)},
        )
        for name, (sources, flags) in EXTENSIONS.items()
    ]
    previous = Path.cwd()
    os.chdir(tree)  # setuptools takes sources and packages relative to the project directory
    try:
        setup(
            name="apex",
            version=f"0.1+zerolab.{label}",
            packages=find_packages(include=["apex", "apex.*"]),
            ext_modules=extensions,
            cmdclass={"build_ext": BuildExtension},
            zip_safe=False,
            script_args=["build", "--build-base", str(out / "build"), "bdist_wheel", "--dist-dir", str(out)],
        )
    finally:
        os.chdir(previous)
    (wheel,) = out.glob("apex-*.whl")
    return wheel


def _check_toolchain() -> None:
    """Fail before fetching anything when this Python's torch cannot build CUDA extensions."""
    # torch here, not at the top: only in the engine's environment
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    if torch.version.cuda is None:
        raise UserError(f"apex's CUDA extensions need a CUDA build of torch; this one is {torch.__version__}")
    if CUDA_HOME is None:
        raise UserError(
            f"apex's CUDA extensions need nvcc: torch found no CUDA toolkit (CUDA_HOME, nvcc on PATH, "
            f"/usr/local/cuda). Install the CUDA {torch.version.cuda} toolkit or set CUDA_HOME"
        )
    if not os.environ.get(ARCH_LIST_VARIABLE) and not torch.cuda.is_available():
        raise UserError(f"no GPU to build apex for: set {ARCH_LIST_VARIABLE} (e.g. 9.0 for H100)")


def _missing_in_a_new_process() -> list[str]:
    """missing_modules() as a fresh interpreter of this environment sees them after the install."""
    code = (
        "import importlib.util, sys; print(*(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))"
    )
    result = subprocess.run([sys.executable, "-c", code, *APEX_MODULES], capture_output=True, text=True)
    return result.stdout.split() if result.returncode == 0 else list(APEX_MODULES)


def _run(argv: list[str]) -> None:
    if subprocess.run(argv, check=False).returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed (output above)")
