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
            "or checkout). Then compile what runs would: Megatron's dataset helpers (smoke-checked) "
            "and, when the engine's torch is a CUDA build that sees a GPU (or TORCH_CUDA_ARCH_LIST is "
            "set), apex's extensions from pins.toml's commit (or ZEROLAB_APEX_SRC) where missing and "
            "Megatron's fused kernels for those GPUs; on CPU, DeepSpeed's CPU ops. Fast when "
            "everything is already in place."
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

    install(without=tuple(args.without))
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    """Print the doctor report; 0 when nothing is missing, else 1."""

    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if report["missing"] else 0
