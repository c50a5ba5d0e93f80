"""The engine's compiled parts, built by the engine's own Python: the same commands for `make
setup` (zerolab.engine.install runs them) and for the GPU image (the Dockerfile runs them).

    python -m zerolab.engine.build data-helpers ENGINE_DIR   compile the dataset helpers, smoke-check them
    python -m zerolab.engine.build apex --workdir DIR         apex's modules, built from pins.toml if missing
    python -m zerolab.engine.build fused-kernels ENGINE_DIR  compile the fused softmax kernels (CUDA)

Standard library at module level: the image runs it before zerolab's dependencies are installed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from zerolab.contracts import PREBUILD_KERNELS_MODULE
from zerolab.engine import apex, data_helpers, fused_kernels
from zerolab.errors import UserError


def _data_helpers(args: argparse.Namespace) -> int:
    data_dir = args.engine_dir / data_helpers.DATA_DIR
    module = data_helpers.build(data_dir, Path(sys.executable))
    check = data_helpers.smoke_check(data_dir, Path(sys.executable))
    if check.ok:
        print(f"data helpers: {module.name}: {check.detail}")
    else:
        print(
            f"data helpers: {module.name}: {check.detail}; runs build the sample index with the engine's "
            f"Python implementation instead (workaround {data_helpers.SMOKE_WORKAROUND})"
        )
    return 0


def _apex(args: argparse.Namespace) -> int:
    print(apex.ensure(args.workdir))
    return 0


def _fused_kernels(args: argparse.Namespace) -> int:
    if subprocess.run([sys.executable, "-m", PREBUILD_KERNELS_MODULE, str(args.engine_dir)]).returncode != 0:
        raise UserError(f"compiling Megatron's fused kernels in {args.engine_dir} failed (output above)")
    names = ", ".join(fused_kernels.built(args.engine_dir))
    print(f"fused kernels: {names} in {fused_kernels.build_dir(args.engine_dir)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `python -m zerolab.engine.build`."""
    parser = argparse.ArgumentParser(
        prog="python -m zerolab.engine.build", description=__doc__.split("\n\n")[0]
    )
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("data-helpers", help="compile Megatron's dataset helpers and smoke-check them")
    step.add_argument("engine_dir", type=Path)
    step.set_defaults(run=_data_helpers)
    step = steps.add_parser("apex", help="apex's modules the engine imports; built from pins.toml if missing")
    step.add_argument("--workdir", type=Path, required=True, help="where apex's source is fetched")
    step.set_defaults(run=_apex)
    step = steps.add_parser("fused-kernels", help="compile Megatron's fused softmax kernels (CUDA)")
    step.add_argument("engine_dir", type=Path)
    step.set_defaults(run=_fused_kernels)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one build step; a problem the user can fix is one line and exit status 2."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except UserError as error:
        print(f"zerolab: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
