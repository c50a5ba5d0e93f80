"""An sbatch script that runs a recipe's launch across the nodes of a SLURM allocation, and an
array job of several such runs (`zerolab sweep --slurm`: one array task per cell).

One task per node: each starts the recipe's launcher (torchrun, or deepspeed without SSH) with
its node rank from SLURM, the first node of the allocation as rendezvous address, and the same
environment, Megatron arguments and DeepSpeed config as a single-node launch: the render of
`zerolab.recipe.render`, placed by the job (scheduled_placement) and writing into the job's run
directory (docs/run-directory.md) `logs/NAME/slurm-JOBID/`: recipe facts, ds_config.json, the
combined train.log, checkpoints and status.json. Submit it from the repository root. An
array job's task i does the same for run i, into the run directory it names (an earlier one
there is moved aside first).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from string import Template

from zerolab import rundir
from zerolab.contracts import DS_CONFIG_FILE, REQUEST_FILE
from zerolab.errors import UserError
from zerolab.recipe.facts import run_facts
from zerolab.recipe.job import job_of
from zerolab.recipe.output import REQUEST_END, resolved_yaml
from zerolab.recipe.render import Launch, Placement, render, shell_variable
from zerolab.recipe.resumption import Resume, resumed_facts
from zerolab.recipe.schema import Recipe

IMAGE_ENGINE_DIR = "/opt/Megatron-DeepSpeed"
"""Where the image keeps Megatron-DeepSpeed (the Dockerfile's ZEROLAB_ENGINE_DIR)."""

IMAGE_REPO_DIR = "/workspace/zerolab"
"""The repository root inside the image, the launch's working directory."""

TEMPLATE = Path(__file__).with_name("sbatch.tmpl")
RUN_DIR_TEMPLATE = Path(__file__).with_name("run_dir.tmpl")

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


def scheduled_placement(run_dir: str) -> Placement:
    """In a SLURM job: each node's rank, node 0's address and the job's own rendezvous port (the
    script's MASTER_PORT: two jobs sharing a node do not meet on one) from the job's shell
    variables, a hostfile of the allocation in the run directory, every node starting its own ranks."""
    hostfile = f"{run_dir}/{rundir.HOSTFILE}"
    return Placement(
        shell_variable("SLURM_NODEID"),
        shell_variable("MASTER_ADDR"),
        hostfile,
        ssh=False,
        master_port=shell_variable("MASTER_PORT"),
    )


def sbatch_for_recipe(
    recipe: Recipe, launch: Launch, options: SlurmOptions, resume: Resume | None = None
) -> str:
    """The sbatch script of a loaded recipe and its launch (render_for_job), continuing `resume`'s
    checkpoint when given: one job writing logs/NAME/slurm-JOBID/."""
    return _job(
        title=f"Recipe {recipe.name} on a SLURM allocation, one task per node.",
        rendered_by="zerolab render --slurm",
        directives=_directives(recipe, launch, recipe.name, options, output="logs/slurm-%x-%j.out"),
        run=_run_dir_block(recipe, launch, f'"logs/{recipe.name}/slurm-${{SLURM_JOB_ID}}"', resume),
        launch=launch,
        first=bool(launch.before),
        options=options,
        mounts=_mounts([recipe]),
    )


@dataclass(frozen=True)
class ArrayTask:
    """One task of an array job: a loaded recipe run into `run_dir` (relative to the directory
    the job is submitted from), an earlier run directory there moved first to `previous` + the
    job's array ids."""

    recipe: Recipe
    launch: Launch
    """The recipe's launch as a job runs it (render_for_job)."""
    run_dir: str
    previous: str
    resume: Resume | None = None
    """The run whose checkpoint the task continues."""


def sbatch_array(tasks: list[ArrayTask], name: str, options: SlurmOptions, *, rendered_by: str) -> str:
    """One sbatch array job, task i running tasks[i] as `sbatch_for_recipe` runs a recipe (the
    same render, placed on the task's nodes). Every task gets the same allocation: UserError when
    the recipes ask for different nodes or GPUs per node."""
    launches = [task.launch for task in tasks]
    shapes = sorted({(launch.nodes, launch.procs_per_node) for launch in launches})
    if len(shapes) > 1:
        asked = ", ".join(f"{nodes} node(s) x {procs}" for nodes, procs in shapes)
        raise UserError(
            f"the cells ask for different allocations ({asked}), and an array job's tasks all get one; "
            "sweep hardware.nodes or hardware.procs_per_node with one job per value "
            "(`zerolab render --slurm` each)"
        )
    branches = []
    for index, (task, launch) in enumerate(zip(tasks, launches, strict=True)):
        run_dir = shlex.quote(task.run_dir)
        previous = shlex.quote(task.previous) + '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'
        branches.append(
            f"{index})\n"
            f"if [[ -e {run_dir} ]]; then\n"
            f"  mkdir -p {shlex.quote(str(Path(task.previous).parent))}\n"
            f"  mv {run_dir} {previous}\n"
            "fi\n"
            f"{_run_dir_block(task.recipe, launch, run_dir, task.resume)}\n;;"
        )
    choose = (
        'case "${SLURM_ARRAY_TASK_ID}" in\n'
        + "\n".join(branches)
        + '\n*) echo "no task ${SLURM_ARRAY_TASK_ID} in this array of '
        + f'{len(tasks)}" >&2; exit 2;;\nesac'
    )
    return _job(
        title=f"{name}: {len(tasks)} runs as one array job, one task per run, each on its own allocation.",
        rendered_by=rendered_by,
        directives=[
            f"--array=0-{len(tasks) - 1}",
            *_directives(tasks[0].recipe, launches[0], name, options, output="logs/slurm-%x-%A_%a.out"),
        ],
        run=choose,
        launch=launches[0],
        first=any(launch.before for launch in launches),
        options=options,
        mounts=_mounts([task.recipe for task in tasks]),
    )


def render_for_job(recipe: Recipe, options: SlurmOptions, resume: Resume | None) -> Launch:
    """The recipe's launch as a job runs it: into the job's run directory, placed by SLURM; a
    checkpointing job also loads its own last checkpoint, so that a requeued job (`scontrol
    requeue`, a preemption) resumes instead of starting over (Megatron starts from scratch when
    there is none yet)."""
    exported = job_of(recipe).run_exported_at_start()
    if exported is not None:
        raise UserError(
            f"finetune.model={exported}: a SLURM job does not export a run directory's "
            f"model; export it first (zerolab export {exported} --out DIR) and set "
            "finetune.model=DIR"
        )
    return render(
        recipe,
        run_dir=RUN_DIR,
        resume=resume,
        placement=scheduled_placement(RUN_DIR),
        engine=IMAGE_ENGINE_DIR if options.image else None,
        load_own_checkpoints=resume is None,
    )


def _mounts(recipes: list[Recipe]) -> list[str]:
    """The host directories of the absolute input paths of `recipes` (mounted with an image)."""
    paths = [path for recipe in recipes for path in _input_paths(recipe)]
    return sorted({str(Path(path).parent) for path in paths if path and Path(path).is_absolute()})


def _directives(
    recipe: Recipe, launch: Launch, name: str, options: SlurmOptions, *, output: str
) -> list[str]:
    """The #SBATCH options of a job running `launch`: GPUs only for a CUDA recipe (a CPU recipe's
    ranks are processes: a GPU request would keep it off nodes without GPUs), output appended
    when the job is requeued."""
    directives = [
        f"--job-name={name}",
        f"--nodes={launch.nodes}",
        "--ntasks-per-node=1",
        *([f"--gpus-per-node={launch.procs_per_node}"] if recipe.hardware.device == "cuda" else []),
        "--exclusive",
        f"--time={options.time_limit}",
        f"--output={output}",
        "--open-mode=append",
    ]
    if options.partition:
        directives.append(f"--partition={options.partition}")
    if options.account:
        directives.append(f"--account={options.account}")
    return directives


def _run_dir_block(recipe: Recipe, launch: Launch, run_dir: str, resume: Resume | None) -> str:
    """Shell lines that set RUN_DIR to `run_dir` (a shell word), write the run's files there
    (ds_config.json, run.json, recipe.yaml), set `command` to the launch and `first` to the steps
    run once before it (a resume's conversion of its checkpoint)."""
    facts = run_facts(recipe).model_copy(update=resumed_facts(resume))
    first = " && ".join(shlex.join(step) for step in launch.before)

    return (
        Template(RUN_DIR_TEMPLATE.read_text())
        .substitute(
            run_dir=run_dir,
            ds_config_file=DS_CONFIG_FILE,
            run_file=rundir.RUN_FILE,
            recipe_file=rundir.RECIPE_FILE,
            recipe_yaml=resolved_yaml(recipe),
            ds_config=json.dumps(launch.ds_config, indent=2),
            run_json=json.dumps(rundir.facts_json(facts), indent=2),
            request=_request_block(launch),
            command=shlex.quote(f"exec {launch.words()}"),
            first=f"\nfirst={shlex.quote(first)}" if first else "",
        )
        .rstrip("\n")
    )


def _request_block(launch: Launch) -> str:
    """A fine-tuning's request.json, written into RUN_DIR by the job (nothing for pretraining)."""
    if launch.request is None:
        return ""
    text = json.dumps(launch.request.as_json(), indent=2)
    return f"""
cat > "${{RUN_DIR}}"/{REQUEST_FILE} <<'{REQUEST_END}'
{text}
{REQUEST_END}
"""


def _job(
    *,
    title: str,
    rendered_by: str,
    directives: list[str],
    run: str,
    launch: Launch,
    options: SlurmOptions,
    mounts: list[str],
    first: bool = False,
) -> str:
    """The sbatch script: `run` (shell lines that set RUN_DIR and `command` and write the run's
    files), then the allocation's hostfile, one task per node running `command`, status.json."""
    return Template(TEMPLATE.read_text()).substitute(
        title=title,
        rendered_by=rendered_by,
        directives="\n".join(f"#SBATCH {line}" for line in directives),
        run=run,
        slots=launch.procs_per_node,
        hostfile=rundir.HOSTFILE,
        environment=_environment(options),
        first=_first(options, mounts) if first else "",
        srun=_srun(options, mounts),
        write_status=rundir.status_shell(
            '"${RUN_DIR}"', '"${state}"', '"${exit_code}"', '"${started}"', '"$(date -u +%Y-%m-%dT%H:%M:%SZ)"'
        ),
    )


def _input_paths(recipe: Recipe) -> list[str]:
    """The files a run reads that a recipe may give as absolute paths."""
    return job_of(recipe).input_paths()


def _environment(options: SlurmOptions) -> str:
    """Without an image, the job's launcher gets command.sh's environment (Launch.exports): the
    engine's bin directory first on PATH, this checkout's zerolab first on PYTHONPATH (the ranks
    import the zerolab that wrote the job, not whichever the engine environment has installed)."""
    return "" if options.image else f"{Launch.exports()}\n"


def _first(options: SlurmOptions, mounts: list[str]) -> str:
    """Where a task sets `first`: its steps, run once on one node before the ranks start."""
    srun = _srun(options, mounts, tasks="--nodes=1 --ntasks=1")
    return f'if [[ -n "${{first:-}}" ]]; then\n{srun} \\\n    bash -c "${{first}}"\nfi\n'


def _srun(options: SlurmOptions, mounts: list[str], tasks: str = "--ntasks-per-node=1") -> str:
    words = [
        "srun",
        tasks,
        "--kill-on-bad-exit=1",
        f'--output="${{RUN_DIR}}/{rundir.LOG_FILE}"',
        "--open-mode=append",
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
