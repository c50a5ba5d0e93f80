"""An sbatch script that runs a recipe's launch across the nodes of a SLURM allocation.

One task per node: each starts the recipe's launcher (torchrun, or deepspeed without
SSH) with its node rank from SLURM, the first node of the allocation as rendezvous
address, and the same environment, Megatron arguments and DeepSpeed config as a
single-node launch. The job writes a run directory (docs/run-directory.md) under
`logs/NAME/slurm-JOBID/`: recipe facts, ds_config.json, the combined train.log and
status.json. Submit it from the repository root.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Protocol

from zerolab.errors import UserError

IMAGE_ENGINE_DIR = "/opt/Megatron-DeepSpeed"
"""Where the image keeps Megatron-DeepSpeed (the Dockerfile's ZEROLAB_ENGINE_DIR)."""

IMAGE_REPO_DIR = "/workspace/zerolab"
"""The repository root inside the image, the launch's working directory."""

TEMPLATE = Path(__file__).with_name("sbatch.tmpl")

_NODE_RANK = "@@NODE_RANK@@"
_MASTER_ADDR = "@@MASTER_ADDR@@"
_RUN_DIR = "@@RUN_DIR@@"


class LaunchLike(Protocol):
    """What the sbatch needs of `zerolab.recipe.render(recipe)` (the Launch contract)."""

    argv: list[str]
    env: dict[str, str]
    ds_config: dict[str, Any]
    nodes: int
    procs_per_node: int


@dataclass(frozen=True)
class SlurmOptions:
    """Site settings the recipe does not know."""

    image: str | None = None
    """Container image run by pyxis (`srun --container-image`); None runs the hosts' own
    engine environment (`make setup` on a shared file system)."""
    partition: str | None = None
    account: str | None = None
    time_limit: str = "02:00:00"
    engine_bin: str | None = None
    """Without an image: the directory holding the engine's python, torchrun and deepspeed."""


def node_argv(argv: list[str]) -> list[str]:
    """The launch argv for one node of the allocation, with placeholders for the node rank,
    the rendezvous address and the run directory."""
    if not argv:
        raise UserError("the render has an empty argv; nothing to launch")
    launcher, rest = argv[0], list(argv[1:])
    if launcher == "torchrun":
        rest = _without_options(rest, ("--node-rank", "--node_rank", "--master-addr", "--master_addr"))
        head = ["torchrun", "--node-rank", _NODE_RANK, "--master-addr", _MASTER_ADDR]
    elif launcher == "deepspeed":
        rest = _without_options(rest, ("--hostfile", "--node_rank", "--master_addr"))
        hostfile = f"{_RUN_DIR}/hostfile"
        head = [
            "deepspeed",
            "--hostfile",
            hostfile,
            "--no_ssh",
            "--node_rank",
            _NODE_RANK,
            "--master_addr",
            _MASTER_ADDR,
        ]
    else:
        raise UserError(f"launcher {launcher!r}: an sbatch script can start torchrun or deepspeed only")
    if "--deepspeed_config" in rest:
        rest[rest.index("--deepspeed_config") + 1] = f"{_RUN_DIR}/ds_config.json"
    return [*head, *rest]


def render_sbatch(
    launch: LaunchLike, *, name: str, options: SlurmOptions, facts: dict[str, Any] | None = None
) -> str:
    """The sbatch script for `launch` (a render of recipe `name`)."""
    argv = node_argv(launch.argv)
    if options.image:
        argv = [_in_image(token) for token in argv]
    environment = [f"{key}={value}" for key, value in launch.env.items()]
    command = shlex.join(["exec", "env", *environment, *argv])
    for placeholder, variable in (
        (_NODE_RANK, "SLURM_NODEID"),
        (_MASTER_ADDR, "MASTER_ADDR"),
        (_RUN_DIR, "RUN_DIR"),
    ):
        command = command.replace(placeholder, f'"${{{variable}}}"')
    directives = [
        f"--job-name={name}",
        f"--nodes={launch.nodes}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={launch.procs_per_node}",
        "--exclusive",
        f"--time={options.time_limit}",
        "--output=logs/slurm-%x-%j.out",
    ]
    if options.partition:
        directives.append(f"--partition={options.partition}")
    if options.account:
        directives.append(f"--account={options.account}")
    return Template(TEMPLATE.read_text()).substitute(
        name=name,
        directives="\n".join(f"#SBATCH {line}" for line in directives),
        slots=launch.procs_per_node,
        ds_config=json.dumps(launch.ds_config, indent=2),
        run_json=json.dumps(facts or {"name": name}, indent=2),
        environment=_environment(options),
        srun=_srun(options),
        command=shlex.quote(command),
    )


def sbatch_for_recipe(recipe: Any, options: SlurmOptions) -> str:
    """The sbatch script of a loaded recipe (`zerolab.recipe.load_recipe`)."""
    from zerolab.recipe import render, run_facts

    return render_sbatch(render(recipe), name=recipe.name, options=options, facts=run_facts(recipe))


def _without_options(args: list[str], names: tuple[str, ...]) -> list[str]:
    """`args` less each option in `names` and the value that follows it."""
    kept: list[str] = []
    skip = False
    for token in args:
        if skip:
            skip = False
        elif token in names:
            skip = True
        else:
            kept.append(token)
    return kept


def _in_image(token: str) -> str:
    """A path to the engine's pretrain script, moved to the image's engine directory."""
    if token.endswith("/pretrain_gpt.py"):
        return f"{IMAGE_ENGINE_DIR}/pretrain_gpt.py"
    return token


def _environment(options: SlurmOptions) -> str:
    if options.image or not options.engine_bin:
        return ""
    return f'export PATH={shlex.quote(options.engine_bin)}:"${{PATH}}"\n'


def _srun(options: SlurmOptions) -> str:
    words = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", '--output="${RUN_DIR}/train.log"']
    if options.image:
        mounts = f"${{PWD}}/logs:{IMAGE_REPO_DIR}/logs,${{PWD}}/data:{IMAGE_REPO_DIR}/data"
        words += [
            f"--container-image={shlex.quote(options.image)}",
            f'--container-mounts="{mounts}"',
            f"--container-workdir={IMAGE_REPO_DIR}",
        ]
    return " \\\n    ".join(words)
