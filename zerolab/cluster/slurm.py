"""An sbatch script that runs a recipe's launch across the nodes of a SLURM allocation.

One task per node: each starts the recipe's launcher (torchrun, or deepspeed without SSH) with
its node rank from SLURM, the first node of the allocation as rendezvous address, and the same
environment, Megatron arguments and DeepSpeed config as a single-node launch: the render of
`zerolab.recipe.render`, placed by the job (Placement.scheduled) and writing into the job's run
directory (docs/run-directory.md) `logs/NAME/slurm-JOBID/`: recipe facts, ds_config.json, the
combined train.log, checkpoints and status.json. Submit it from the repository root.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from string import Template

from zerolab import rundir
from zerolab.recipe.render import Launch, Placement, Resume, render, shell_variable
from zerolab.recipe.schema import Recipe

IMAGE_ENGINE_DIR = "/opt/Megatron-DeepSpeed"
"""Where the image keeps Megatron-DeepSpeed (the Dockerfile's ZEROLAB_ENGINE_DIR)."""

IMAGE_REPO_DIR = "/workspace/zerolab"
"""The repository root inside the image, the launch's working directory."""

TEMPLATE = Path(__file__).with_name("sbatch.tmpl")

RUN_DIR = shell_variable("RUN_DIR")
"""The job's run directory, set by the script: logs/NAME/slurm-JOBID."""


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


def sbatch_for_recipe(recipe: Recipe, options: SlurmOptions, *, resume: Resume | None = None) -> str:
    """The sbatch script of a loaded recipe (`zerolab.recipe.load_recipe`), continuing `resume`."""
    from zerolab.recipe import run_facts
    from zerolab.recipe.output import resolved_yaml

    launch = render(
        recipe,
        run_dir=RUN_DIR,
        resume=resume,
        placement=Placement.scheduled(RUN_DIR),
        engine=IMAGE_ENGINE_DIR if options.image else None,
    )
    outside = sorted({str(Path(path).parent) for path in _input_paths(recipe) if Path(path).is_absolute()})
    return render_sbatch(
        launch,
        name=recipe.name,
        options=options,
        facts=run_facts(recipe),
        recipe_yaml=resolved_yaml(recipe),
        mounts=outside,
    )


def render_sbatch(
    launch: Launch,
    *,
    name: str,
    options: SlurmOptions,
    facts: rundir.RunFacts,
    recipe_yaml: str,
    mounts: list[str] | None = None,
) -> str:
    """The sbatch script for `launch` (a render of recipe `name`, whose run.json is `facts` and
    resolved recipe `recipe_yaml`); with an image, `mounts` are host directories (absolute input
    paths) mounted at the same path beside logs/ and data/."""
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
        hostfile=rundir.HOSTFILE,
        ds_config_file=rundir.DS_CONFIG_FILE,
        run_file=rundir.RUN_FILE,
        recipe_file=rundir.RECIPE_FILE,
        recipe_yaml=recipe_yaml,
        ds_config=json.dumps(launch.ds_config, indent=2),
        run_json=json.dumps(rundir.facts_json(facts), indent=2),
        environment=_environment(options),
        srun=_srun(options, mounts or []),
        command=shlex.quote(f"exec {launch.words()}"),
        write_status=rundir.status_shell(
            '"${RUN_DIR}"', '"${state}"', '"${exit_code}"', '"${started}"', '"$(date -u +%Y-%m-%dT%H:%M:%SZ)"'
        ),
    )


def _input_paths(recipe: Recipe) -> list[str]:
    """The files a run reads that a recipe may give as absolute paths."""
    from zerolab.recipe.inputs import dataset_paths, tokenizer_file

    return [
        *dataset_paths(recipe).values(),
        *(tokenizer_file(recipe, key) for key in ("vocab_file", "merge_file")),
    ]


def _environment(options: SlurmOptions) -> str:
    if options.image or not options.engine_bin:
        return ""
    return f'export PATH={shlex.quote(options.engine_bin)}:"${{PATH}}"\n'


def _srun(options: SlurmOptions, mounts: list[str]) -> str:
    words = [
        "srun",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f'--output="${{RUN_DIR}}/{rundir.LOG_FILE}"',
    ]
    if options.image:
        inside = [f"${{PWD}}/logs:{IMAGE_REPO_DIR}/logs", f"${{PWD}}/data:{IMAGE_REPO_DIR}/data"]
        inside += [f"{directory}:{directory}" for directory in mounts]
        words += [
            f"--container-image={shlex.quote(options.image)}",
            f'--container-mounts="{",".join(inside)}"',
            f"--container-workdir={IMAGE_REPO_DIR}",
        ]
    return " \\\n    ".join(words)
