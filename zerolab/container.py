"""Build-time steps of the GPU image (Dockerfile), kept in one stdlib-only module so that
the image's dependency layer needs nothing but this file and zerolab/engine/pins.*.

`python -m zerolab.container requirements OUT` writes the engine's pip pins (pins.toml,
without the packages the NVIDIA base image provides); `relax-constraints FILE REQS...`
drops those names from NGC's pip constraint file, as NVIDIA documents for overriding a
package; `check-modules` fails the build when apex or its CUDA extensions are absent,
`check-deepspeed-ops` when an op the recipes load was not prebuilt, `check-engine` when
the Dockerfile's engine commit is not pins.toml's;
`prebuild-fused-kernels ENGINE_DIR` compiles Megatron's fused softmax kernels so that no
run compiles them at start.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from zerolab.engine.pins import load_pins

BASE_IMAGE_PACKAGES = ("torch",)
"""Pinned in pins.toml for the CPU environment, but taken from the NVIDIA base image:
its torch is built against the image's CUDA, cuDNN and NCCL, and apex's extensions are
compiled against it. A PyPI torch would replace it and break apex."""

APEX_MODULES = ("apex", "amp_C", "fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda")
"""What Megatron-DeepSpeed imports on CUDA: apex's fused layer norm and FusedAdam
(`fused_layer_norm_cuda`, `amp_C` for multi-tensor apply) and the gradient-accumulation
fusion kernel (`fused_weight_gradient_mlp_cuda`)."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical_name(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): lower case, runs of -_. as -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str | None:
    """The canonical package name a requirement or constraint line is about; None for
    blank lines, comments and pip options (`-r`, `--index-url`)."""
    text = line.split("#", 1)[0].strip()
    if not text or text.startswith("-"):
        return None
    match = _NAME.match(text)
    return canonical_name(match.group(1)) if match else None


def image_requirements() -> list[str]:
    """pins.toml's pip pins, less the packages the base image provides."""
    return load_pins().requirements(without=BASE_IMAGE_PACKAGES)


def relax_constraints(constraints: str, names: set[str]) -> tuple[str, list[str]]:
    """The constraint file without the lines about `names` (canonical), and those lines."""
    kept, dropped = [], []
    for line in constraints.splitlines(keepends=True):
        (dropped if requirement_name(line) in names else kept).append(line)
    return "".join(kept), [line.strip() for line in dropped]


def missing_modules(names: tuple[str, ...]) -> list[str]:
    """The modules among `names` that cannot be found (nothing is imported: the build
    has no GPU)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def _write_requirements(args: argparse.Namespace) -> int:
    args.out.write_text("\n".join(image_requirements()) + "\n")
    return 0


def _relax(args: argparse.Namespace) -> int:
    if not args.constraints.is_file():
        print(f"{args.constraints}: no constraint file, nothing to relax")
        return 0
    names = {
        name
        for path in args.requirements
        for line in path.read_text().splitlines()
        if (name := requirement_name(line))
    }
    text, dropped = relax_constraints(args.constraints.read_text(), names)
    args.constraints.write_text(text)
    listed = ", ".join(dropped) or "-"
    print(f"{args.constraints}: dropped {len(dropped)} constraint(s) for pinned packages: {listed}")
    return 0


def _check_modules(args: argparse.Namespace) -> int:
    missing = missing_modules(tuple(args.modules))
    if missing:
        print(
            f"missing Python modules: {', '.join(missing)}. The base image must ship NVIDIA apex with its "
            "C++/CUDA extensions (see docs/compatibility.md)",
            file=sys.stderr,
        )
        return 1
    print(f"found: {', '.join(args.modules)}")
    return 0


def _check_engine(args: argparse.Namespace) -> int:
    pins = load_pins()
    if (args.repo, args.commit) != (pins.engine_repo, pins.engine_commit):
        print(
            f"engine {args.repo} at {args.commit} differs from zerolab/engine/pins.toml "
            f"({pins.engine_repo} at {pins.engine_commit}); change pins.toml, the single source of versions",
            file=sys.stderr,
        )
        return 1
    return 0


def _check_deepspeed_ops(args: argparse.Namespace) -> int:
    from deepspeed.git_version_info import installed_ops

    missing = [op for op in args.ops if not installed_ops.get(op)]
    if missing:
        print(f"DeepSpeed ops not prebuilt: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"DeepSpeed ops prebuilt: {', '.join(args.ops)}")
    return 0


def _prebuild_fused_kernels(args: argparse.Namespace) -> int:
    source = args.engine_dir / "megatron" / "fused_kernels" / "__init__.py"
    spec = importlib.util.spec_from_file_location("megatron_fused_kernels", source)
    if spec is None or spec.loader is None:
        print(f"{source}: not found; is {args.engine_dir} a Megatron-DeepSpeed checkout?", file=sys.stderr)
        return 1
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # The same arguments as a training run with masked-softmax fusion on (Megatron's
    # default): the build flags, and so the cached build, are identical.
    module.load(SimpleNamespace(masked_softmax_fusion=True, rank=0))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `python -m zerolab.container`."""
    parser = argparse.ArgumentParser(prog="python -m zerolab.container", description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("requirements", help="write the engine's pip pins for the image")
    step.add_argument("out", type=Path)
    step.set_defaults(run=_write_requirements)
    step = steps.add_parser("relax-constraints", help="drop NGC constraints on the packages the image pins")
    step.add_argument("constraints", type=Path)
    step.add_argument("requirements", type=Path, nargs="+")
    step.set_defaults(run=_relax)
    step = steps.add_parser("check-modules", help="fail unless these modules can be found")
    step.add_argument("modules", nargs="*", default=list(APEX_MODULES))
    step.set_defaults(run=_check_modules)
    step = steps.add_parser("check-engine", help="fail unless REPO and COMMIT are pins.toml's engine")
    step.add_argument("repo")
    step.add_argument("commit")
    step.set_defaults(run=_check_engine)
    step = steps.add_parser(
        "check-deepspeed-ops", help="fail unless DeepSpeed was installed with these ops built"
    )
    step.add_argument("ops", nargs="+")
    step.set_defaults(run=_check_deepspeed_ops)
    step = steps.add_parser("prebuild-fused-kernels", help="compile Megatron's fused softmax kernels")
    step.add_argument("engine_dir", type=Path)
    step.set_defaults(run=_prebuild_fused_kernels)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one build step."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
