"""Megatron's parser and DeepSpeed's config classes, asked about rendered launches before anything
starts: what the schema cannot vouch for (extra.megatron_args, extra.ds_config) is checked by the
engine itself. One engine subprocess judges any number of launches (its imports take most of the
time: about 2.5 s, with the launch's workarounds)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerolab.contracts import rank_script
from zerolab.engine.paths import engine_dir, engine_missing, engine_python, engine_python_env, zerolab_on_path
from zerolab.errors import UserError

CHECKER = rank_script("parser_check")


@dataclass(frozen=True)
class Case:
    """One launch to judge: its Megatron arguments, ds_config, world and data-parallel sizes, and
    the ds_config keys DeepSpeed must be seen to read (`vouch`: the recipe's extra.ds_config). With
    `argument_dump` (each argument as a log's dump printed it), the engine rebuilds the arguments
    from it (its outcome's `rebuilt_args`; `unreached`: the arguments no command line gives their
    printed value; `unknown`: those the engine does not have)."""

    name: str
    megatron_args: list[str]
    ds_config: dict[str, Any]
    world_size: int
    data_parallel: int
    vouch: dict[str, Any] = field(default_factory=dict)
    argument_dump: dict[str, str] = field(default_factory=dict)


def judge(cases: list[Case], *, timeout_s: float = 300) -> dict[str, dict[str, Any]]:
    """Each case's outcome: `megatron` and `deepspeed` (what they made of it) or
    `megatron_error` / `deepspeed_error` (one line each). UserError without the engine."""
    missing = engine_missing()
    if missing:
        raise UserError(f"cannot ask the engine: {missing}")
    with tempfile.TemporaryDirectory(prefix="zerolab-check-") as scratch:
        folder = Path(scratch)
        payload = []
        for number, case in enumerate(cases):
            config_file = folder / f"ds_config_{number}.json"
            config_file.write_text(json.dumps(case.ds_config))
            payload.append(
                {
                    "name": case.name,
                    "megatron_args": _with_config_path(case.megatron_args, str(config_file)),
                    "ds_config": case.ds_config,
                    "world_size": case.world_size,
                    "data_parallel": case.data_parallel,
                    "vouch": case.vouch,
                    "argument_dump": _with_dumped_config_path(case.argument_dump, str(config_file)),
                }
            )
        (folder / "cases.json").write_text(json.dumps(payload))
        env = engine_python_env() | zerolab_on_path(engine_dir()) | {"DS_ACCELERATOR": "cpu", "RANK": "0"}
        results_file = folder / "results.json"
        run = subprocess.run(
            [
                str(engine_python()),
                str(CHECKER),
                str(folder / "cases.json"),
                str(results_file),
                str(folder / "store"),
            ],
            cwd=engine_dir(),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if run.returncode != 0 or not results_file.is_file():
            raise UserError(
                "the engine's argument check failed to run (exit code "
                f"{run.returncode}): {run.stderr.strip().splitlines()[-1:] or 'no output'}"
            )
        return json.loads(results_file.read_text())


def megatron_args_of(argv: list[str]) -> list[str]:
    """The arguments after pretrain_gpt.py in a launcher's argv."""
    script = next(i for i, token in enumerate(argv) if token.endswith("pretrain_gpt.py"))
    return argv[script + 1 :]


def refusals(outcome: dict[str, Any]) -> list[str]:
    """What Megatron and DeepSpeed refused in one outcome, as message lines."""
    return [
        f"{who}: {outcome[key]}"
        for who, key in (("Megatron", "megatron_error"), ("DeepSpeed", "deepspeed_error"))
        if key in outcome
    ]


def _with_dumped_config_path(dump: dict[str, str], path: str) -> dict[str, str]:
    if dump.get("deepspeed_config", "None") != "None":
        return dump | {"deepspeed_config": path}
    return dump


def _with_config_path(args: list[str], path: str) -> list[str]:
    args = list(args)
    if "--deepspeed_config" in args:
        args[args.index("--deepspeed_config") + 1] = path
    return args
