"""A run's checkpoint in DeepSpeed's universal format, written beside it and reused: what lets a run
continue under another ZeRO stage or data-parallel size (`pretrain_gpt.py --universal-checkpoint`).

Run by the engine's Python before the ranks start (the launch's first step):
`python -m zerolab.rank.universal_checkpoint ENGINE_DIR CHECKPOINTS_DIR ITERATION`. DeepSpeed's
ds_to_universal converts `global_stepN` into `global_stepN_universal` (zerolab.contracts names
both) and records it in `latest_universal`, which the engine loads. The conversion writes into a
`.partial` folder renamed when whole, so that a conversion cut short is never taken for a done one;
a folder already converted is reused. Two launches continuing the same checkpoint at once (two
terminals, a sweep's SLURM array tasks) convert it once: the second waits on the conversion's lock
(zerolab.contracts.holding), saying whose, then reuses it. A checkpoint the conversion cannot read
exits with status 2 and one line saying why; Ctrl-C leaves no partial folder, with one line."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from zerolab.contracts import LATEST_UNIVERSAL, error_prefix, holding, step_folder, universal_folder
from zerolab.rank.collector import collector_paused
from zerolab.rank.prompt_exit import exit_now
from zerolab.rank.workarounds import deepspeed_without_its_unused_imports

PARTIAL_SUFFIX = ".partial"
LOCK_SUFFIX = ".lock"


def convert(checkpoints: Path, iteration: int) -> Path:
    """The universal folder of the checkpoint at `iteration` in `checkpoints`, converted now unless
    it already was; `latest_universal` names it."""
    source = checkpoints / step_folder(iteration)
    target = checkpoints / universal_folder(iteration)
    lock = target.with_name(target.name + LOCK_SUFFIX)
    with holding(lock, f"the conversion of {source}", waiting=lambda holder: _waiting(target, holder)):
        _convert(source, target)
        latest = checkpoints / LATEST_UNIVERSAL
        partial = latest.with_name(f".{latest.name}.{os.getpid()}.partial")
        partial.write_text(target.name)
        os.replace(partial, latest)
    return target


def _waiting(target: Path, holder: str) -> None:
    print(f"zerolab: waiting for {holder} (it writes {target})", flush=True)


def _convert(source: Path, target: Path) -> None:
    """Convert `source` into `target` unless done before (under the lock)."""
    if not target.is_dir():
        # deepspeed here, not at the top: the engine's environment only, after the engine's
        # directory is on sys.path (the checkpoint's pickled arguments name megatron's classes)
        with collector_paused():
            deepspeed_without_its_unused_imports()
            from deepspeed.checkpoint.ds_to_universal import main

        partial = target.with_name(target.name + PARTIAL_SUFFIX)
        shutil.rmtree(partial, ignore_errors=True)
        arguments = argparse.Namespace(
            input_folder=str(source),
            output_folder=str(partial),
            num_extract_workers=1,
            num_merge_workers=1,
            keep_temp_folder=False,
            strict=True,
            inject_missing_state=False,
        )
        try:
            main(arguments)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        partial.rename(target)
        print(f"zerolab: converted {source} into {target}", flush=True)
    else:
        print(f"zerolab: reusing {target}, converted before", flush=True)


def main(argv: list[str]) -> int:
    """Convert (or reuse) and say so; 2 with one line when the checkpoint cannot be converted, 130
    with one when stopped by Ctrl-C."""
    engine_dir, checkpoints, iteration = argv
    sys.path.insert(0, engine_dir)
    try:
        convert(Path(checkpoints), int(iteration))
    except KeyboardInterrupt:
        print(
            f"{error_prefix('launch')}interrupted (Ctrl-C): {checkpoints} holds no conversion of it "
            "(the next launch converts it)",
            file=sys.stderr,
        )
        return 130
    except Exception as error:  # whatever stops the conversion: the checkpoint cannot be read as one
        name = f"{type(error).__name__}: {error}"
        print(
            f"{error_prefix('launch')}{checkpoints}: the checkpoint at iteration {iteration} cannot be "
            f"converted to the universal format ({name})",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
