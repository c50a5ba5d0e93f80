"""The launch backends by the name hardware.backend gives them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zerolab.backends.base import Backend
from zerolab.backends.hostfile import HostfileBackend
from zerolab.backends.local import LocalBackend
from zerolab.backends.slurm import SlurmBackend
from zerolab.errors import UserError

BACKENDS: dict[str, Callable[[Any], Backend]] = {
    "local": lambda _site: LocalBackend(),
    "hostfile": lambda _site: HostfileBackend(),
    "slurm": lambda site: SlurmBackend(site) if site is not None else SlurmBackend(),
}
"""hardware.backend's values, each with how to make its backend from the command's site options
(`--image`, `--partition`... : zerolab.backends.slurm_options; None when none is given)."""


def backend_named(name: str, site: Any = None) -> Backend:
    """The backend hardware.backend names, made with the site options `site`."""
    if name not in BACKENDS:
        raise UserError(f"hardware.backend {name}: no such backend; one of {', '.join(BACKENDS)}")
    return BACKENDS[name](site)
