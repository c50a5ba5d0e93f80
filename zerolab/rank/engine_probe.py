"""Run by the engine's Python (as a script: standard library and zerolab's import hooks, which doctor
puts on the path, at module level) to report what `zerolab doctor` cannot see from outside: torch,
CUDA or CPU, devices and the CUDA toolkit torch builds with, apex's modules, DeepSpeed (imported as
a rank imports it), its accelerator and its C++/CUDA ops.
Arguments: the JSON file to write, apex's modules (comma-separated:
zerolab.engine.apex.APEX_MODULES), then the packages to report."""

import importlib
import importlib.util
import json
import os
import platform
import sys
import sysconfig
from importlib import metadata

# Run as a file, this directory comes first on sys.path, where zerolab's own engine modules
# (apex.py, cuda.py) would stand in for the packages being probed.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]

from zerolab.rank.collector import collector_paused  # noqa: E402
from zerolab.rank.workarounds import deepspeed_without_its_unused_imports  # noqa: E402


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def probe(packages, apex_modules):
    """What the engine environment holds; errors are reported, not raised."""
    report = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": {name: _version(name) for name in packages},
        "cpu_count": os.cpu_count(),
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    }
    try:
        # torch here, not at the top: only in the engine's environment
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, get_default_build_root
    except Exception as error:
        report["torch_error"] = f"{type(error).__name__}: {error}"
        return report
    report["torch"] = torch.__version__
    report["cuda_available"] = torch.cuda.is_available()
    report["cuda_version"] = torch.version.cuda
    report["cuda_home"] = CUDA_HOME
    if report["cuda_available"]:
        report["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    report["devices"] = [
        {
            "name": torch.cuda.get_device_name(i),
            "memory_GiB": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
            "capability": "{}.{}".format(*torch.cuda.get_device_capability(i)),
        }
        for i in range(torch.cuda.device_count())
    ]
    report["apex"] = _apex(apex_modules, load=report["cuda_available"])
    cuda = "cpu" if torch.version.cuda is None else "cu" + torch.version.cuda.replace(".", "")
    folder = f"py{sys.version_info.major}{sys.version_info.minor}{sys.abiflags}_{cuda}"
    report["torch_extensions_dir"] = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        get_default_build_root(), folder
    )  # as torch.utils.cpp_extension places JIT-built ops
    if not report["cuda_available"]:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        # deepspeed here, not at the top: only in the engine's environment; as a rank imports it
        deepspeed_without_its_unused_imports()
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


def _apex(names, *, load):
    """Each of apex's modules the engine imports: found, and (with `load`: only on CUDA, where
    the engine imports them) whether it imports; apex's version."""
    modules = {}
    for name in names:
        found = importlib.util.find_spec(name) is not None
        entry = {"found": found}
        if found and load:
            try:
                importlib.import_module(name)
            except Exception as error:
                entry["error"] = f"{type(error).__name__}: {error}"[:300]
        modules[name] = entry
    return {"version": _version("apex"), "modules": modules}


if __name__ == "__main__":
    out_path, apex_modules, packages = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
    with collector_paused():  # torch's and DeepSpeed's imports, the probe's time
        report = probe(packages, apex_modules)
    with open(out_path, "w") as out:
        json.dump(report, out)
