"""Run by the engine's Python (as a script, standard library at module level) to report what
`zerolab doctor` cannot see from outside: torch, CUDA or CPU and devices, DeepSpeed, its
accelerator and its C++/CUDA ops. Writes JSON to the path given as the only argument."""

import json
import os
import platform
import sys
from importlib import metadata


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def probe(packages):
    """What the engine environment holds; errors are reported, not raised."""
    report = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": {name: _version(name) for name in packages},
        "cpu_count": os.cpu_count(),
    }
    try:
        import torch
        from torch.utils.cpp_extension import get_default_build_root
    except Exception as error:
        report["torch_error"] = f"{type(error).__name__}: {error}"
        return report
    report["torch"] = torch.__version__
    report["cuda_available"] = torch.cuda.is_available()
    report["cuda_version"] = torch.version.cuda
    if report["cuda_available"]:
        report["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    report["devices"] = [
        {
            "name": torch.cuda.get_device_name(i),
            "memory_GiB": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
        }
        for i in range(torch.cuda.device_count())
    ]
    cuda = "cpu" if torch.version.cuda is None else "cu" + torch.version.cuda.replace(".", "")
    folder = f"py{sys.version_info.major}{sys.version_info.minor}{sys.abiflags}_{cuda}"
    report["torch_extensions_dir"] = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        get_default_build_root(), folder
    )  # as torch.utils.cpp_extension places JIT-built ops
    if not report["cuda_available"]:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import installed_ops
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception as error:
        report["deepspeed_error"] = f"{type(error).__name__}: {error}"
        return report
    report["deepspeed"] = deepspeed.__version__
    report["accelerator"] = get_accelerator().device_name()
    report["ops"] = {
        name: {"installed": bool(installed_ops.get(name)), "compatible": bool(builder.is_compatible(False))}
        for name, builder in sorted(ALL_OPS.items())
    }
    return report


if __name__ == "__main__":
    out_path, packages = sys.argv[1], sys.argv[2:]
    with open(out_path, "w") as out:
        json.dump(probe(packages), out)
