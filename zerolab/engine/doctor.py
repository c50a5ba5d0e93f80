"""`zerolab doctor [--json]`: is this machine ready to train? Python, torch, CUDA or CPU and
the devices, the CUDA toolkit and the architectures to build for, DeepSpeed and its compiled
ops, apex's modules and Megatron's fused kernels (on CUDA; not needed on CPU), Megatron's
dataset helpers (smoke-checked), the engine's commit against the pin, the tokenizer files,
and for everything missing the command that fixes it."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from zerolab import __version__
from zerolab.assets import GPT2_SHA256
from zerolab.checksums import sha256_of
from zerolab.contracts import rank_script
from zerolab.engine import cuda, data_helpers, fused_kernels
from zerolab.engine.apex import APEX_MODULES, APEX_SRC_VARIABLE
from zerolab.engine.checkout import checkout_commit
from zerolab.engine.container import kept_builds
from zerolab.engine.paths import (
    engine_dir,
    engine_python,
    engine_python_env,
    zerolab_home,
    zerolab_on_path,
)
from zerolab.engine.pins import load_pins
from zerolab.engine.record import read_record
from zerolab.files import write_json_atomic
from zerolab.locations import REPO_ROOT

PROBE_SCRIPT = rank_script("engine_probe")
PROBE_CACHE = "doctor-probe.json"
SETUP_FIX = "make setup  (or: zerolab engine install)"
TOOLS = ("git", "make", "g++")


def collect(*, cached: bool = False) -> dict[str, Any]:
    """The doctor report. `cached` reuses the engine probe while the engine environment is
    unchanged (a launch records the report without paying for DeepSpeed's import every time)."""
    pins = load_pins()
    missing: list[dict[str, str]] = []
    commit = checkout_commit(engine_dir()) if engine_dir().is_dir() else None
    engine = {
        "dir": str(engine_dir()),
        "commit": commit,
        "pinned_commit": pins.engine_commit,
        "matches_pin": commit == pins.engine_commit,
        "python": str(engine_python()),
        "install_record": read_record(),
    }
    if commit is None:
        missing.append({"what": f"Megatron-DeepSpeed checkout at {engine_dir()}", "fix": SETUP_FIX})
    elif commit != pins.engine_commit:
        missing.append(
            {
                "what": f"Megatron-DeepSpeed at the pinned commit {pins.engine_commit[:12]} "
                f"({engine_dir()} is at {commit[:12]})",
                "fix": f"move {engine_dir()} away, then {SETUP_FIX}",
            }
        )
    probe = probe_engine(pins.python, cached=cached) if engine_python().is_file() else None
    compiled: dict[str, Any] = {}
    if probe is None:
        missing.append({"what": f"the engine's Python environment ({engine_python()})", "fix": SETUP_FIX})
    else:
        missing += _probe_problems(probe, pins.python)
        compiled = _compiled_parts(probe)
        missing += compiled.pop("missing")
    tokenizer = {
        path.name: {"path": str(path), "ok": path.is_file() and sha256_of(path) == digest}
        for path, digest in GPT2_SHA256.items()
    }
    for name, entry in tokenizer.items():
        if not entry["ok"]:
            missing.append(
                {"what": f"the GPT-2 {name} bundled with zerolab", "fix": "git checkout -- zerolab/assets"}
            )
    tools = {tool: shutil.which(tool) for tool in TOOLS}
    for tool, where in tools.items():
        if where is None:
            missing.append(
                {
                    "what": f"{tool} (Megatron compiles its dataset helpers)",
                    "fix": "apt-get install build-essential git",
                }
            )
    return {
        "zerolab": {"version": __version__, "repo": str(REPO_ROOT), "python": platform.python_version()},
        "image": os.environ.get("ZEROLAB_IMAGE"),
        "engine": engine,
        "engine_env": probe,
        **compiled,
        "tokenizer": tokenizer,
        "tools": tools,
        "missing": missing,
    }


def _probe_problems(probe: dict[str, Any], pins: dict[str, str]) -> list[dict[str, str]]:
    """Pins the engine environment does not meet. In the GPU image (ZEROLAB_IMAGE set), or where
    the engine's torch is a CUDA build, the machine's own builds of BASE_IMAGE_PACKAGES (torch)
    stand in for their CPU pins (container.kept_builds)."""
    problems = []
    kept = kept_builds(os.environ.get("ZEROLAB_IMAGE"), probe.get("cuda_version"))
    for name, wanted in pins.items():
        have = probe["packages"].get(name)
        if name in kept and have is not None:
            continue
        if have is None or have.split("+")[0] != wanted:
            problems.append(
                {"what": f"{name}=={wanted} in the engine environment (has {have})", "fix": SETUP_FIX}
            )
    for key in ("torch_error", "deepspeed_error"):
        if key in probe:
            problems.append({"what": f"a working import ({probe[key]})", "fix": SETUP_FIX})
    return problems


APEX_FIX = (
    f"{SETUP_FIX}: builds them from pins.toml's apex commit (offline: {APEX_SRC_VARIABLE}=/path/to/apex.git)"
)


def _compiled_parts(probe: dict[str, Any]) -> dict[str, Any]:
    """The CUDA plan, apex's modules and the fused kernels (needed on CUDA only) and the dataset
    helpers (always: smoke-checked), each with what is missing."""
    plan = cuda.plan(probe, cuda.query_gpus(), cuda.env_arch_list())
    missing = [plan.problem] if plan.problem else []
    apex = probe.get("apex") or {"version": None, "modules": {}}
    kernels = {"built": fused_kernels.built(engine_dir()), "dir": str(fused_kernels.build_dir(engine_dir()))}
    if plan.needed:
        absent = [name for name in APEX_MODULES if not apex["modules"].get(name, {}).get("found")]
        broken = [f"{name} ({entry['error']})" for name, entry in apex["modules"].items() if "error" in entry]
        if absent or broken:
            missing.append(
                {
                    "what": f"apex's {', '.join(absent + broken)} (Megatron imports them on CUDA)",
                    "fix": APEX_FIX,
                }
            )
        if len(kernels["built"]) < len(fused_kernels.KERNELS):
            missing.append(
                {"what": f"Megatron's fused softmax kernels, built in {kernels['dir']}", "fix": SETUP_FIX}
            )
    data_dir = engine_dir() / data_helpers.DATA_DIR
    module = data_helpers.module_path(data_dir, probe.get("ext_suffix") or ".so")
    helpers: dict[str, Any] = {"module": str(module), "built": module.is_file()}
    if module.is_file():
        check = data_helpers.smoke_check(data_dir, engine_python())
        helpers |= {"ok": check.ok, "detail": check.detail}
        helpers["workaround"] = None if check.ok else data_helpers.SMOKE_WORKAROUND
    else:
        missing.append({"what": f"Megatron's dataset helpers ({module})", "fix": SETUP_FIX})
    return {
        "cuda": asdict(plan),
        "apex": apex | {"needed": plan.needed},
        "fused_kernels": kernels | {"needed": plan.needed},
        "data_helpers": helpers,
        "missing": missing,
    }


def probe_engine(packages: dict[str, str], *, cached: bool) -> dict[str, Any]:
    """Run probe.py with the engine's Python; with `cached`, reuse the last result while the
    engine environment's site-packages are unchanged. Whether each op is JIT-built is always
    looked up afresh."""
    python = engine_python()
    key = {
        "python": str(python),
        "site_packages": _site_packages_stamp(python),
        "packages": sorted(packages),
        "probe": sha256_of(PROBE_SCRIPT),  # its content, not its time: checkouts side by side share
    }
    cache = zerolab_home() / PROBE_CACHE
    result = None
    if cached and cache.is_file():
        try:
            stored = json.loads(cache.read_text())
            result = stored["probe"] if stored.get("key") == key else None
        except (json.JSONDecodeError, KeyError):
            result = None
    if result is None:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "probe.json"
            env = engine_python_env() | zerolab_on_path()
            subprocess.run(
                [str(python), str(PROBE_SCRIPT), str(out), ",".join(APEX_MODULES), *packages],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                cwd=scratch,
            )
            result = (
                json.loads(out.read_text())
                if out.is_file()
                else {"packages": {}, "torch_error": "probe failed"}
            )
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache, {"key": key, "probe": result})
    extensions = result.get("torch_extensions_dir")
    for name, op in result.get("ops", {}).items():
        op["jit_built"] = bool(extensions) and (Path(extensions) / name / f"{name}.so").is_file()
    return result


def _site_packages_stamp(python: Path) -> list[float]:
    """Modification times of the environment's site-packages directories (they change on install)."""
    lib = python.parent.parent / "lib"
    return sorted(path.stat().st_mtime for path in lib.glob("python3*/site-packages"))


def print_report(report: dict[str, Any]) -> None:
    """The report as tables on the terminal."""

    console = Console()
    table = Table(title="zerolab doctor", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    env = report["engine_env"]
    engine = report["engine"]
    zerolab = report["zerolab"]
    unknown = "unknown: no engine environment"
    rows = [
        ("zerolab", f"{zerolab['version']} ({zerolab['repo']}), Python {zerolab['python']}"),
        (
            "engine Python",
            f"{env['python']} at {engine['python']}"
            if env
            else f"missing: {engine['python']}; fix: {SETUP_FIX}",
        ),
        ("image", report["image"] or "none (a local environment)"),
        ("torch", (env.get("torch") or env.get("torch_error") or "-") if env else unknown),
        ("device", _device_row(env) if env else unknown),
        ("NCCL", (env.get("nccl") or "-") if env else unknown),
        (
            "DeepSpeed",
            f"{env.get('deepspeed') or env.get('deepspeed_error') or '-'} "
            f"(accelerator: {env.get('accelerator', '-')})"
            if env
            else unknown,
        ),
        ("Megatron-DeepSpeed", _checkout_row(engine)),
        (
            "tokenizer",
            ", ".join(
                f"{name} {'ok' if e['ok'] else 'MISSING or changed'}"
                for name, e in report["tokenizer"].items()
            ),
        ),
        (
            "tools",
            ", ".join(f"{tool} {'ok' if where else 'MISSING'}" for tool, where in report["tools"].items()),
        ),
        *_compiled_rows(report),
        ("ZeRO++ qwZ/qgZ", zeropp_quantizer_row(env) if env else unknown),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    if env and env.get("ops"):
        ops = Table(title="DeepSpeed ops", title_justify="left")
        for column in ("op", "prebuilt", "JIT-built", "compatible"):
            ops.add_column(column)
        for name, op in env["ops"].items():
            ops.add_row(name, *("yes" if op[k] else "no" for k in ("installed", "jit_built", "compatible")))
        console.print(ops)
    if report["missing"]:
        console.print("[bold red]missing[/]")
        for item in report["missing"]:
            console.print(f"  - {item['what']}\n    fix: [bold]{item['fix']}[/]")
    else:
        console.print("[green]ready to train[/]")


QUANTIZER_OP = "quantizer"
"""DeepSpeed's op that ZeRO++'s quantized weights and gradients load (QuantizerBuilder)."""


def zeropp_quantizer_row(env: dict[str, Any]) -> str:
    """Whether this machine can run ZeRO++'s qwZ and qgZ: a CUDA accelerator whose DeepSpeed builds
    the quantizer op (hpZ and MiCS need none)."""
    op = (env.get("ops") or {}).get(QUANTIZER_OP)
    if env.get("accelerator") != "cuda":
        return (
            f"no: the {env.get('accelerator', '-')} accelerator has no {QUANTIZER_OP} op (QuantizerBuilder, "
            "CUDA sources); hpZ and MiCS run here"
        )
    if op is None or not op["compatible"]:
        return f"no: DeepSpeed's {QUANTIZER_OP} op is not compatible here (ds_report says why)"
    built = "prebuilt" if op["installed"] else ("JIT-built" if op.get("jit_built") else "built on first use")
    return f"yes: the {QUANTIZER_OP} op is compatible ({built})"


def _device_row(env: dict[str, Any]) -> str:
    """The GPUs the engine's torch sees, or that it sees none; unknown when torch did not load."""
    devices = env.get("devices") or []
    if devices:
        return ", ".join(f"{d['name']} ({d['memory_GiB']} GiB)" for d in devices)
    if "cuda_available" not in env:
        return f"unknown: the engine's torch did not load ({env.get('torch_error', 'no report')})"
    cores = f" ({env['cpu_count']} cores)" if env.get("cpu_count") else ""
    return f"CPU only{cores}, CUDA {'available' if env['cuda_available'] else 'not available'}"


def _checkout_row(engine: dict[str, Any]) -> str:
    """The engine checkout: missing, at the pin, or at another commit."""
    commit, pin = engine["commit"], engine["pinned_commit"]
    if commit is None:
        return f"missing: no checkout at {engine['dir']}; fix: {SETUP_FIX}"
    if commit == pin:
        return f"{commit[:12]} (pin {pin[:12]}: matches) at {engine['dir']}"
    return f"{commit[:12]} at {engine['dir']}: not the pinned {pin[:12]}"


def _compiled_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Doctor's rows for the CUDA plan, apex, the fused kernels and the dataset helpers."""
    if "cuda" not in report:
        return []
    plan, apex, kernels, helpers = (report[key] for key in ("cuda", "apex", "fused_kernels", "data_helpers"))
    if plan["needed"]:
        modules = ", ".join(
            f"{name} {'ok' if entry.get('found') and 'error' not in entry else 'MISSING'}"
            for name, entry in ((name, apex["modules"].get(name, {})) for name in APEX_MODULES)
        )
        apex_row = f"{apex['version'] or '-'}: {modules}"
        kernels_row = f"{len(kernels['built'])} of {len(fused_kernels.KERNELS)} built in {kernels['dir']}"
    else:
        apex_row = kernels_row = "not built: CUDA is not used here (the CUDA row says why)"
    if not helpers["built"]:
        helpers_row = f"MISSING: {helpers['module']}"
    elif helpers["ok"]:
        helpers_row = f"{Path(helpers['module']).name}: {helpers['detail']} (smoke check)"
    else:
        helpers_row = (
            f"{Path(helpers['module']).name}: {helpers['detail']}: runs use the engine's Python "
            f"build_sample_idx (workaround {helpers['workaround']})"
        )
    return [
        ("CUDA", ("" if plan["needed"] else "not used: ") + plan["reason"]),
        ("apex", apex_row),
        ("fused kernels", kernels_row),
        ("data helpers", helpers_row),
    ]
