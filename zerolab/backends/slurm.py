"""The slurm backend: the launch as an sbatch job placed on its allocation's nodes by SLURM
(slurm_script), submitted from this login node and followed to its end (slurm_job); a
checkpointing job resumes from its own checkpoints when requeued. A sweep's cells go as one
array job (zerolab.sweep.array)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zerolab.backends import slurm_job
from zerolab.backends.base import LaunchPlan, print_now
from zerolab.backends.slurm_job import SlurmRun
from zerolab.backends.slurm_script import SlurmOptions, render_for_job, sbatch_for_recipe
from zerolab.recipe.render import Launch
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import Recipe
from zerolab.rundir import Status


@dataclass(frozen=True)
class SlurmBackend:
    """A SLURM job (hardware.backend slurm, or --slurm)."""

    options: SlurmOptions = field(default_factory=SlurmOptions)
    name: str = "slurm"

    def problems(self, recipe: Recipe, *, engine_required: bool = True) -> list[str]:
        """None here: the job's nodes are not this machine (sbatch's absence is refused at submit)."""
        return []

    def launched(self, recipe: Recipe) -> Recipe:
        """As given: the job's nodes agree on the port set, else the default."""
        return recipe

    def run_dir(self, name: str, *, logs_root: Path, given: Path | None) -> Path | None:
        """None: the job makes logs/NAME/slurm-JOBID itself."""
        return None

    def render(self, recipe: Recipe, *, run_dir: str, resume: Resume | None) -> Launch:
        """Placed by SLURM, into the run directory the job makes (its RUN_DIR, whatever `run_dir`)."""
        return render_for_job(recipe, self.options, resume)

    def job(self, plan: LaunchPlan) -> str:
        """The sbatch script."""
        return sbatch_for_recipe(plan.recipe, plan.launch, self.options, plan.resume)

    def write(self, plan: LaunchPlan, *, echo: Callable[[str], None] = print_now) -> SlurmJob:
        """The sbatch script, ready to submit (its run directory gets it once SLURM names the job)."""
        return SlurmJob(plan.name, self.job(plan))

    def submit(self, job: SlurmJob, *, echo: Callable[[str], None] = print_now) -> SlurmRun:
        """sbatch the script from this directory."""
        return slurm_job.submit(job.script, job.name, echo=echo)

    def follow(self, run: SlurmRun, *, echo: Callable[[str], None] = print_now) -> tuple[Path, Status]:
        """Follow the job until SLURM ends it, printing its state changes and train.log's lines."""
        directory, status = slurm_job.follow(run, echo=echo)
        echo(
            f"zerolab: {run.name} {status.state} (exit code {status.exit_code})"
            f"{': ' + status.cause if status.cause else ''}; run directory {directory}\n"
        )
        return directory, status

    def cancel(self, run: SlurmRun, number: int) -> None:
        """scancel the job."""
        slurm_job.cancel(run, number)


@dataclass(frozen=True)
class SlurmJob:
    """A SLURM launch written: the sbatch script."""

    name: str
    script: str
