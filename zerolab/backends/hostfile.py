"""The hostfile backend: the deepspeed launcher on this machine starting the ranks of every node
hardware.hostfile lists, over pdsh (or ssh), with the rest of the launch's environment in the run
directory's deepspeed_env. The run directory is made here, as the local backend makes it; the
other nodes see it on a shared file system."""

from __future__ import annotations

from dataclasses import dataclass

from zerolab.backends.local import LocalBackend
from zerolab.recipe.schema import Recipe


@dataclass(frozen=True)
class HostfileBackend(LocalBackend):
    """The local backend, with every node started from here (hardware.backend hostfile)."""

    name: str = "hostfile"

    def problems(self, recipe: Recipe, *, engine_required: bool = True) -> list[str]:
        """The local backend's, and a launch that could not start the other nodes from here."""
        hw = recipe.hardware
        problems = super().problems(recipe, engine_required=engine_required)
        if hw.launcher != "deepspeed" or hw.hostfile is None:
            problems.append(
                "hardware.backend hostfile starts every node from here with the deepspeed launcher: set "
                "hardware.launcher=deepspeed and hardware.hostfile (one `hostname slots=N` line per node)"
            )
        return problems
