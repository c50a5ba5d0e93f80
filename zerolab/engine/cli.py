"""`zerolab engine install`: set up (or verify) the pinned engine (what `make setup` runs)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `zerolab engine`."""
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
    install.set_defaults(run=run_install)


def run_install(args: argparse.Namespace) -> int:
    """Install the engine."""
    from zerolab.engine.install import install

    install()
    return 0
