"""`zerolab engine install`: set up (or verify) the pinned engine (what `make setup` runs);
`zerolab doctor`: what is set up, and the fix for what is missing."""

from __future__ import annotations

import argparse
import json

from zerolab.engine.doctor import collect, print_report
from zerolab.engine.install import install


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `zerolab engine` and `zerolab doctor`."""
    parser = subparsers.add_parser("engine", help="set up the pinned training engine")
    actions = parser.add_subparsers(dest="engine_command", metavar="ACTION", required=True)
    install = actions.add_parser(
        "install",
        help="virtual env with the pins of pins.toml, Megatron-DeepSpeed at the pinned commit, its builds",
        description=(
            "Create (or verify) the engine's virtual environment at ZEROLAB_HOME/venv with every pin "
            "of zerolab/engine/pins.toml and zerolab itself, and check out Megatron-DeepSpeed at the "
            "pinned commit: cloned from upstream, or from ZEROLAB_ENGINE_SRC (a local git directory "
            "or checkout). Then compile what runs would: Megatron's dataset helpers (smoke-checked); "
            "on CPU, DeepSpeed's CPU ops. On CUDA nothing else is compiled unless --cuda-builds asks: "
            "launches use zerolab's torch stand-ins for apex, and no recipe calls Megatron's fused "
            "softmax kernels by default. Fast when everything is already in place."
        ),
    )
    install.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="PIN",
        help="leave this pin of pins.toml uninstalled (repeatable; the GPU check leaves out what its "
        "offline kit does not carry)",
    )
    install.add_argument(
        "--cuda-builds",
        action="store_true",
        help="on CUDA, also build apex's extensions (pins.toml's commit, or ZEROLAB_APEX_SRC) where "
        "missing and Megatron's fused softmax kernels for the GPUs here (minutes of nvcc; the GPU image "
        "has them)",
    )
    install.add_argument(
        "--no-build",
        action="store_true",
        help="compile nothing (a machine with no time to build: Megatron's dataset helpers are then "
        "stood in for by the engine's Python build_sample_idx)",
    )
    install.set_defaults(run=run_install)

    doctor = subparsers.add_parser(
        "doctor",
        help="check the engine, devices and tokenizer; say how to fix what is missing",
        description="Report Python, torch, CUDA or CPU and devices, DeepSpeed and its compiled ops, "
        "the Megatron-DeepSpeed commit against the pin, the tokenizer files, and what is missing "
        "with the command that fixes it. Exit status 1 when something is missing.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(run=run_doctor)


def run_install(args: argparse.Namespace) -> int:
    """Install the engine."""

    install(without=tuple(args.without), prebuild=not args.no_build, cuda_builds=args.cuda_builds)
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    """Print the doctor report; 0 when nothing is missing, else 1."""

    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if report["missing"] else 0
