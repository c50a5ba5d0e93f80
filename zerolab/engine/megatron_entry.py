"""`python -m zerolab.engine.megatron_entry PRETRAIN_SCRIPT ARGS...`: what every rank runs.

Applies zerolab's workarounds (zerolab.engine.workarounds), then runs PRETRAIN_SCRIPT as
`__main__` with sys.argv = [PRETRAIN_SCRIPT, *ARGS], exactly as `python PRETRAIN_SCRIPT ARGS...`
would. The DeepSpeed launcher puts `--local_rank=N` before PRETRAIN_SCRIPT; it is passed on
after ARGS, where Megatron's argument parser reads it. Standard library only: it runs inside
the engine's environment.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from zerolab.engine.workarounds import apply_all


def main(argv: list[str]) -> None:
    """Run the training script `argv[0]` with arguments `argv[1:]` under the workarounds."""
    if argv and argv[0].startswith("--local_rank="):
        argv = [*argv[1:], argv[0]]
    if not argv:
        sys.exit("usage: python -m zerolab.engine.megatron_entry PRETRAIN_SCRIPT [ARGS...]")
    script = Path(argv[0]).resolve()
    if not script.is_file():
        sys.exit(f"zerolab: no training script at {script}")
    applied = apply_all()
    if os.environ.get("RANK", "0") == "0":
        for workaround in applied:
            print(f"zerolab: workaround {workaround.name}: {workaround.why}", flush=True)
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
