"""A torch.profiler table of a few training steps (ZEROLAB_PROFILE_DIR, ZEROLAB_PROFILE_STEPS): a
patch of the engine's train_step applied at launch when the environment asks for it; rank 0 writes
the table."""

from __future__ import annotations

import os
import types
from typing import Any

from zerolab.rank.import_hooks import launch_patch, patch_after_import

TRAINING = "megatron.training"
PROFILE_DIR_ENV = "ZEROLAB_PROFILE_DIR"
"""A directory in a launch's environment applies profile_training_steps: rank 0 writes
profile_file(directory, 0) there."""
PROFILE_STEPS_ENV = "ZEROLAB_PROFILE_STEPS"
"""`FIRST,LAST`: the training steps profiled (default 3,5)."""
DEFAULT_PROFILE_STEPS = (3, 5)
PROFILE_ROWS = 25


def profile_file(directory: str, rank: int) -> str:
    """The profile table that `rank` writes into `directory`."""
    return os.path.join(directory, f"profile-rank{rank}.txt")


def profile_steps() -> tuple[int, int]:
    """The first and last training step to profile, from ZEROLAB_PROFILE_STEPS."""
    text = os.environ.get(PROFILE_STEPS_ENV, "")
    if not text:
        return DEFAULT_PROFILE_STEPS
    parts = text.split(",")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise ValueError(f"{PROFILE_STEPS_ENV}={text!r}: write FIRST,LAST training steps, e.g. 3,5")
    first, last = (int(part) for part in parts)
    if not 1 <= first <= last:
        raise ValueError(f"{PROFILE_STEPS_ENV}={text!r}: steps count from 1 and FIRST <= LAST")
    return first, last


def profile_wanted() -> bool:
    """Whether this launch asked for a profile (ZEROLAB_PROFILE_DIR)."""
    if not os.environ.get(PROFILE_DIR_ENV):
        return False
    profile_steps()  # refuses a malformed step range before training starts
    return True


def _profile_train_steps(module: types.ModuleType) -> None:
    # torch here, not at the top: only in the engine's environment
    import torch
    from torch.profiler import ProfilerActivity

    train_step = module.train_step
    first, last = profile_steps()
    directory = os.environ[PROFILE_DIR_ENV]
    rank = int(os.environ.get("RANK", "0"))
    on_gpu = torch.cuda.is_available()
    calls = 0
    profiler: Any = None

    def profiled_train_step(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls, profiler
        calls += 1
        if calls == first and rank == 0:
            activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
            profiler = torch.profiler.profile(activities=activities)
            profiler.start()
        result = train_step(*args, **kwargs)
        if calls == last and profiler is not None:
            if on_gpu:
                torch.cuda.synchronize()
            profiler.stop()
            device = "cuda" if on_gpu else "cpu"
            table = profiler.key_averages().table(
                sort_by=f"self_{'device' if on_gpu else 'cpu'}_time_total", row_limit=PROFILE_ROWS
            )
            os.makedirs(directory, exist_ok=True)
            with open(profile_file(directory, rank), "w") as out:
                out.write(
                    f"# training steps {first}-{last} of rank {rank}, top {PROFILE_ROWS} by self "
                    f"{device} time\n{table}\n"
                )
            profiler = None
        return result

    profiled_train_step.__wrapped__ = train_step  # type: ignore[attr-defined]
    module.train_step = profiled_train_step  # type: ignore[attr-defined]


def profile_training_steps() -> None:
    """Profile training steps (ZEROLAB_PROFILE_STEPS, default 3-5) into ZEROLAB_PROFILE_DIR."""
    patch_after_import(TRAINING, _profile_train_steps)


PROFILE_TRAINING_STEPS = launch_patch(profile_training_steps, profile_wanted, kind="patch")
