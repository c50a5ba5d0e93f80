"""The engine's compiled parts, built by the engine's own Python: the same commands for `make
setup` (zerolab.engine.install runs them) and for the image (the Dockerfile runs them).

    python -m zerolab.engine.build data-helpers ENGINE_DIR        compile the dataset helpers
    python -m zerolab.engine.build check-data-helpers ENGINE_DIR  smoke-check them; exit 1 where they fail
    python -m zerolab.engine.build apex --workdir DIR             apex's modules, built if missing
    python -m zerolab.engine.build fused-kernels ENGINE_DIR       compile the fused softmax kernels (CUDA)

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
    module = data_helpers.build(args.engine_dir / data_helpers.DATA_DIR, Path(sys.executable))
    print(f"data helpers: {module.name} compiled")
    return 0


def _check_data_helpers(args: argparse.Namespace) -> int:
    """The smoke check a launch runs, by this zerolab (the image runs it once its own zerolab is
    installed, for the rank script's imports); unlike `make setup`, which falls back to the engine's
    Python sample index, a failure is the build's."""
    check = data_helpers.smoke_check(args.engine_dir / data_helpers.DATA_DIR, Path(sys.executable))
    if not check.ok:
        print(
            f"data helpers in {args.engine_dir / data_helpers.DATA_DIR}: {check.detail} (the image would run "
            f"every launch on the workaround {data_helpers.SMOKE_WORKAROUND}; fix the build instead)",
            file=sys.stderr,
        )
        return 1
    print(f"data helpers: {check.detail}")
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
    step = steps.add_parser("data-helpers", help="compile Megatron's dataset helpers")
    step.add_argument("engine_dir", type=Path)
    step.set_defaults(run=_data_helpers)
    step = steps.add_parser("check-data-helpers", help="smoke-check the dataset helpers; 1 where they fail")
    step.add_argument("engine_dir", type=Path)
    step.set_defaults(run=_check_data_helpers)
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
