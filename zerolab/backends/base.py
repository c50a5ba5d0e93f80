"""The seam between a launch plan and who runs it: the `Backend` interface, and the `LaunchPlan`
every backend is handed (built by zerolab.launch.plan, rendered once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from zerolab.recipe.render import Launch
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import Recipe
from zerolab.rundir import RunFacts, Status


def print_now(text: str) -> None:
    """A backend's default `echo`: the text on stdout as it comes."""
    print(text, end="", flush=True)


@dataclass(frozen=True)
class LaunchPlan:
    """A checked recipe rendered once for its backend: what `zerolab render` prints and what
    `zerolab launch` runs."""

    recipe: Recipe
    """The recipe as given (recipe.yaml: a port it leaves unset stays unset)."""
    launch: Launch
    """The one render: argv, environment, ds_config, run directory."""
    facts: RunFacts
    """run.json, with the rendezvous port the launch uses."""
    backend: Backend
    resume: Resume | None = None
    run_dir: Path | None = None
    """Where the run directory is made (it does not exist yet); None where the job makes its own."""

    @property
    def name(self) -> str:
        """The run's name: the recipe's, or the resumed run's."""
        return self.recipe.name


class Backend(Protocol):
    """Who starts a launch. A backend decides where the nodes stand (the render's placement and
    run directory) and what keeps a recipe from starting its way from here; it writes the job,
    submits it, follows it to its end and cancels it (zerolab.backends.driver.run calls these, and
    cancels on Ctrl-C)."""

    name: str

    def problems(self, recipe: Recipe, *, engine_required: bool = True) -> list[str]:
        """What keeps `recipe` from starting this way from this machine, each a refusal's message;
        without `engine_required` (a dry run), a missing engine is none."""
        ...

    def launched(self, recipe: Recipe) -> Recipe:
        """The recipe as it launches (a local launch takes a free rendezvous port here)."""
        ...

    def run_dir(self, name: str, *, logs_root: Path, given: Path | None) -> Path | None:
        """The run directory a launch will make (`given`, else a new one under `logs_root/name`),
        decided before rendering; None where the job makes its own."""
        ...

    def render(self, recipe: Recipe, *, run_dir: str, resume: Resume | None) -> Launch:
        """The recipe's launch placed as this backend places it, writing into `run_dir`."""
        ...

    def job(self, plan: LaunchPlan) -> str:
        """The job as text: what `zerolab render` and a dry run print, byte for byte what runs."""
        ...

    def write(self, plan: LaunchPlan, *, echo: Callable[[str], None] = print_now) -> Any:
        """Write the job, ready to submit (the local run directory and its files; the sbatch
        script): what `submit` takes."""
        ...

    def submit(self, job: Any, *, echo: Callable[[str], None] = print_now) -> Any:
        """Start the written job; what `follow` and `cancel` take."""
        ...

    def follow(self, submitted: Any, *, echo: Callable[[str], None] = print_now) -> tuple[Path, Status]:
        """Follow the job to its end, showing its output; its run directory and final status."""
        ...

    def cancel(self, submitted: Any, number: int) -> None:
        """Stop the job, as signal `number` (SIGINT, SIGTERM) asks; `follow` still returns at its
        end, with the job killed. Asked again, stop it at once where the backend can."""
        ...
