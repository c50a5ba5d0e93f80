"""Build-time steps of the GPU image (Dockerfile), kept in one stdlib-only module so that
the image's dependency layer needs nothing but this file and zerolab/engine/pins.*.

`python -m zerolab.engine.container requirements OUT` writes the engine's pip pins (pins.toml,
without the packages the NVIDIA base image provides); `relax-constraints FILE REQS...`
drops those names from NGC's pip constraint file, as NVIDIA documents for overriding a
package; `check-deepspeed-ops` fails the build when an op the recipes load was not
prebuilt, `check-engine` when the Dockerfile's engine commit is not pins.toml's. apex, the
dataset helpers and the fused kernels are built by the same commands as `make setup`
(`python -m zerolab.engine.build`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from zerolab.engine.pins import load_pins

BASE_IMAGE_PACKAGES = ("torch",)
"""Pinned in pins.toml for the CPU environment, but taken from the NVIDIA base image:
its torch is built against the image's CUDA, cuDNN and NCCL, and apex's extensions are
compiled against it. A PyPI torch would replace it and break apex."""


def kept_builds(image: str | None, torch_cuda: str | None) -> tuple[str, ...]:
    """The packages of BASE_IMAGE_PACKAGES the engine environment keeps as it has them, whatever
    their pins: in the GPU image (`image`, ZEROLAB_IMAGE), and wherever its torch is a CUDA build
    (`torch_cuda`, torch.version.cuda): the machine's own, which pip's build of the pinned
    version would replace (on a bare GPU machine, offline, it could not even be fetched)."""
    return BASE_IMAGE_PACKAGES if image or torch_cuda else ()


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
    # deepspeed here, not at the top: only in the engine's environment
    from deepspeed.git_version_info import installed_ops

    missing = [op for op in args.ops if not installed_ops.get(op)]
    if missing:
        print(f"DeepSpeed ops not prebuilt: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"DeepSpeed ops prebuilt: {', '.join(args.ops)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `python -m zerolab.engine.container`."""
    parser = argparse.ArgumentParser(
        prog="python -m zerolab.engine.container", description=__doc__.split("\n\n")[0]
    )
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("requirements", help="write the engine's pip pins for the image")
    step.add_argument("out", type=Path)
    step.set_defaults(run=_write_requirements)
    step = steps.add_parser("relax-constraints", help="drop NGC constraints on the packages the image pins")
    step.add_argument("constraints", type=Path)
    step.add_argument("requirements", type=Path, nargs="+")
    step.set_defaults(run=_relax)
    step = steps.add_parser("check-engine", help="fail unless REPO and COMMIT are pins.toml's engine")
    step.add_argument("repo")
    step.add_argument("commit")
    step.set_defaults(run=_check_engine)
    step = steps.add_parser(
        "check-deepspeed-ops", help="fail unless DeepSpeed was installed with these ops built"
    )
    step.add_argument("ops", nargs="+")
    step.set_defaults(run=_check_deepspeed_ops)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one build step."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
