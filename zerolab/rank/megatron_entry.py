"""`python -m zerolab.rank.megatron_entry PRETRAIN_SCRIPT ARGS...`: what every rank runs.

Applies zerolab's workarounds (zerolab.rank.workarounds) and the opt-in patches its environment
asks for (sdpa_attention, the speed switches and ladder, step_profile, forward_probe), prints each
one applied (rank 0), then runs PRETRAIN_SCRIPT as `__main__` with sys.argv = [PRETRAIN_SCRIPT,
*ARGS], exactly as `python PRETRAIN_SCRIPT ARGS...` would, and ends the process, whether the
script returns or calls sys.exit, without the interpreter's teardown (zerolab.rank.prompt_exit).
Its output is written a whole line at a time, so that the ranks sharing one train.log never split
each other's lines. The DeepSpeed launcher puts `--local_rank=N` before PRETRAIN_SCRIPT; the script
gets it first, as from `python PRETRAIN_SCRIPT --local_rank=N ARGS...` (Megatron's parser reads an
option anywhere). Standard library only: it runs inside the engine's environment.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import runpy
import sys
from pathlib import Path

from zerolab.contracts import ATTENTION_ENV, FLASH_V2, LADDER_ENV, SPEED_ENV, patch_line
from zerolab.rank.apex_standin import APEX_TORCH_STANDINS
from zerolab.rank.forward_probe import FORWARD_PROBE, PROBE_ENV
from zerolab.rank.import_hooks import LaunchPatch, apply_wanted
from zerolab.rank.prompt_exit import exit_as, exit_now
from zerolab.rank.sdpa_attention import SDPA_ATTENTION
from zerolab.rank.speed_ladder import SPEED_LADDER
from zerolab.rank.speed_switches import SPEED_SWITCHES
from zerolab.rank.step_profile import PROFILE_DIR_ENV, PROFILE_STEPS_ENV, PROFILE_TRAINING_STEPS
from zerolab.rank.workarounds import WORKAROUNDS

LAUNCH_PATCHES: tuple[LaunchPatch, ...] = (
    *WORKAROUNDS,
    APEX_TORCH_STANDINS,
    SDPA_ATTENTION,
    *SPEED_SWITCHES,
    SPEED_LADDER,
    PROFILE_TRAINING_STEPS,
    FORWARD_PROBE,
)
"""Everything applied in every rank before the training script: the workarounds, then the opt-in
patches this launch's environment asks for."""
OPT_IN_ENV = (ATTENTION_ENV, SPEED_ENV, LADDER_ENV, PROFILE_DIR_ENV, PROFILE_STEPS_ENV, PROBE_ENV)
"""The environment variables that ask for LAUNCH_PATCHES' opt-in patches."""


def main(argv: list[str]) -> None:
    """Run the training script (the first argument that is not an option) with the other
    arguments under the workarounds. Options before the script are the launcher's own: the
    deepspeed launcher starts a module as `-m MODULE --local_rank=N SCRIPT ARGS...`, and the
    script reads them as it would from `python SCRIPT --local_rank=N ARGS...`."""
    write_whole_lines()
    launcher_options = list(itertools.takewhile(lambda token: token.startswith("-"), argv))
    rest = argv[len(launcher_options) :]
    if not rest:
        sys.exit("usage: python -m zerolab.rank.megatron_entry [OPTIONS] PRETRAIN_SCRIPT [ARGS...]")
    script = Path(rest[0]).resolve()
    if not script.is_file():
        sys.exit(f"zerolab: no training script at {script}")
    if FLASH_V2 in argv and importlib.util.find_spec("flash_attn") is None:
        sys.exit(
            f"zerolab: {FLASH_V2} (model.attention=flash) needs the flash_attn package in the engine's "
            "environment (pip install flash-attn; the NGC PyTorch image ships it), or use "
            "model.attention=sdpa: PyTorch's own fused attention, nothing to install"
        )
    try:
        applied = apply_wanted(LAUNCH_PATCHES)
    except ValueError as error:  # a malformed ZEROLAB_* variable: say which, before any rank trains
        sys.exit(f"zerolab: {error}")
    if os.environ.get("RANK", "0") == "0":
        for patch in applied:
            print(patch_line(patch.kind, patch.name, patch.why), flush=True)
    sys.argv = [str(script), *launcher_options, *rest[1:]]
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as stop:  # the script's own sys.exit: Megatron's exit_interval, exit_duration, signal
        # the interpreter's teardown after it aborted a rank now and then ("terminate called without
        # an active exception", SIGABRT: a run of exit_interval 3 failed after its checkpoint)
        exit_as(stop)
    exit_now(0)


def write_whole_lines() -> None:
    """Make stdout and stderr write each line in one piece. The launchers run every rank unbuffered
    (PYTHONUNBUFFERED, `python -u`) into one shared pipe, where `print(a, b)` is several writes and
    another rank's output lands between them (a 2-rank log read `remote_device ... cpu` as
    `cpudeepspeed_not_implemented`). Line buffering keeps output prompt and lines whole (a pipe
    write of up to 4 KiB is atomic)."""
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=False)


if __name__ == "__main__":
    main(sys.argv[1:])
