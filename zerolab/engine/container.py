"""Build-time steps of the image (Dockerfile: the GPU image and its CPU twin), kept in one
stdlib-only module so that the image's dependency layer needs nothing but this file,
zerolab/engine/pins.*, zerolab/engine/locks.py and the locks.

`python -m zerolab.engine.container requirements OUT` writes the engine's pip pins (pins.toml,
without the packages the base image provides); `constraints OUT` the engine's lock
(requirements/engine.txt) without them, the constraints of the image's pip as of `make setup`'s;
`relax-constraints FILE REQS...` drops those names from NGC's pip constraint file, as NVIDIA
documents for overriding a package; `with-deepspeed-ops ACCELERATOR COMMAND...` runs the pip
install with DeepSpeed told to build the ops the recipes load on ACCELERATOR (cuda or cpu), and
`check-deepspeed-ops ACCELERATOR` fails the build when one was not prebuilt; `check-engine` fails
it when the Dockerfile's engine commit is not pins.toml's. apex, the dataset helpers and the
fused kernels are built by the same commands as `make setup` (`python -m zerolab.engine.build`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from zerolab.engine.locks import ENGINE_LOCK, lock_lines
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


DEEPSPEED_OPS = {
    "cuda": {"cpu_adam": "DS_BUILD_CPU_ADAM", "fused_adam": "DS_BUILD_FUSED_ADAM"},
    "cpu": {"cpu_adam": "DS_BUILD_CPU_ADAM", "deepspeed_shm_comm": "DS_BUILD_SHM_COMM"},
}
"""The DeepSpeed ops the image builds per accelerator (its name, DeepSpeed's build variable):
the ones the recipes load. cpu_adam is ZeRO-Offload's optimizer (gpt2_z3_offload), fused_adam
DeepSpeed's own Adam on CUDA, deepspeed_shm_comm the CPU ranks' shared-memory collectives
(zerolab.engine.install.CPU_OPS, which `make setup` JIT-builds instead)."""


def deepspeed_build_env(accelerator: str) -> dict[str, str]:
    """The variables that make DeepSpeed's setup build exactly DEEPSPEED_OPS[accelerator], for
    that accelerator whatever the build machine has (no GPU in a build)."""
    return {"DS_ACCELERATOR": accelerator, "DS_BUILD_OPS": "0"} | dict.fromkeys(
        DEEPSPEED_OPS[accelerator].values(), "1"
    )


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


def image_constraints() -> list[str]:
    """The engine's lock (requirements/engine.txt), less the packages the base image provides:
    what the pins need, at the versions `make setup` installs and the tests ran."""
    return [line for line in lock_lines(ENGINE_LOCK) if requirement_name(line) not in BASE_IMAGE_PACKAGES]


def relax_constraints(constraints: str, names: set[str]) -> tuple[str, list[str]]:
    """The constraint file without the lines about `names` (canonical), and those lines."""
    kept, dropped = [], []
    for line in constraints.splitlines(keepends=True):
        (dropped if requirement_name(line) in names else kept).append(line)
    return "".join(kept), [line.strip() for line in dropped]


def _write_requirements(args: argparse.Namespace) -> int:
    args.out.write_text("\n".join(image_requirements()) + "\n")
    return 0


def _write_constraints(args: argparse.Namespace) -> int:
    args.out.write_text("\n".join(image_constraints()) + "\n")
    return 0


def _with_deepspeed_ops(args: argparse.Namespace) -> int:
    if not args.command:
        print("with-deepspeed-ops: no command to run", file=sys.stderr)
        return 2
    os.execvpe(args.command[0], args.command, os.environ | deepspeed_build_env(args.accelerator))


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
    from deepspeed.git_version_info import accelerator_name, installed_ops

    ops = list(DEEPSPEED_OPS[args.accelerator])
    missing = [op for op in ops if not installed_ops.get(op)]
    if missing or accelerator_name != args.accelerator:
        print(
            f"DeepSpeed ops not prebuilt for {args.accelerator}: {', '.join(missing) or '-'} "
            f"(DeepSpeed was built for {accelerator_name})",
            file=sys.stderr,
        )
        return 1
    print(f"DeepSpeed ops prebuilt for {args.accelerator}: {', '.join(ops)}")
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
    step = steps.add_parser("constraints", help="write the engine's lock, less the base image's packages")
    step.add_argument("out", type=Path)
    step.set_defaults(run=_write_constraints)
    step = steps.add_parser(
        "with-deepspeed-ops", help="run COMMAND with DeepSpeed told to build the ACCELERATOR's ops"
    )
    step.add_argument("accelerator", choices=sorted(DEEPSPEED_OPS))
    step.add_argument("command", nargs=argparse.REMAINDER)
    step.set_defaults(run=_with_deepspeed_ops)
    step = steps.add_parser("relax-constraints", help="drop NGC constraints on the packages the image pins")
    step.add_argument("constraints", type=Path)
    step.add_argument("requirements", type=Path, nargs="+")
    step.set_defaults(run=_relax)
    step = steps.add_parser("check-engine", help="fail unless REPO and COMMIT are pins.toml's engine")
    step.add_argument("repo")
    step.add_argument("commit")
    step.set_defaults(run=_check_engine)
    step = steps.add_parser(
        "check-deepspeed-ops", help="fail unless DeepSpeed was installed with the ACCELERATOR's ops built"
    )
    step.add_argument("accelerator", choices=sorted(DEEPSPEED_OPS))
    step.set_defaults(run=_check_deepspeed_ops)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one build step."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
