"""`python -m zerolab.rank.megatron_entry SCRIPT ARGS...`: what every rank runs, as each
launcher calls it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from zerolab.locations import REPO_ROOT

SCRIPT = "import json, sys\nprint(json.dumps(sys.argv))\n"


def run_entry(tmp_path, *args: str) -> list[str]:
    script = tmp_path / "pretrain_gpt.py"
    script.write_text(SCRIPT)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "zerolab.rank.megatron_entry",
            *[str(script) if a == "SCRIPT" else a for a in args],
        ],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "RANK": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    argv = json.loads(result.stdout.splitlines()[-1])
    assert argv[0] == str(script)
    return argv[1:]


def test_torchrun_arguments_reach_the_script_unchanged(tmp_path):
    assert run_entry(tmp_path, "SCRIPT", "--num-layers", "2") == ["--num-layers", "2"]


def test_the_deepspeed_launchers_local_rank_before_the_script_reaches_the_script(tmp_path):
    # deepspeed.launcher.launch runs `python -u -m MODULE --local_rank=N SCRIPT ARGS...`; the
    # engine matrix trains under the deepspeed launcher with this order
    assert run_entry(tmp_path, "--local_rank=1", "SCRIPT", "--num-layers", "2") == [
        "--local_rank=1",
        "--num-layers",
        "2",
    ]


PIECEWISE_PRINTER = """import sys
tag = sys.argv[-1]
for number in range(5000):
    print(tag * 40, number, "end", flush=True)  # several writes per line, as Megatron's argument dump
"""


def test_ranks_sharing_one_output_never_split_each_others_lines(tmp_path):
    # every launcher runs the ranks unbuffered into one pipe (train.log); a line split by another
    # rank's output broke the parsing of the 2-rank engine logs (`remote_device ... cpu` read as
    # `cpudeepspeed_not_implemented`)
    script = tmp_path / "pretrain_gpt.py"
    script.write_text(PIECEWISE_PRINTER)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", "RANK": "1"}
    command = f"{sys.executable} -m zerolab.rank.megatron_entry {script} A & "
    command += f"{sys.executable} -m zerolab.rank.megatron_entry {script} B & wait"
    result = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == 10_000
    split = [line for line in lines if not re.fullmatch(r"(A{40}|B{40}) \d+ end", line)]
    assert split == []


EXITING_SCRIPT = """import os, sys
class TornDown:
    def __del__(self, write=os.write):
        write(1, b"torn down")
sys.modules["__main__"].torn_down = TornDown()  # freed by the interpreter's teardown alone
sys.exit(sys.argv[1] if sys.argv[1].startswith("!") else int(sys.argv[1]))
"""


def test_a_script_that_calls_sys_exit_ends_with_its_status_without_the_interpreters_teardown(tmp_path):
    # Megatron's exit_interval ends training by sys.exit(); the teardown that followed aborted a
    # rank now and then ("terminate called without an active exception", SIGABRT), failing the run
    script = tmp_path / "pretrain_gpt.py"
    script.write_text(EXITING_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RANK": "1"}
    for argument, status, stderr in (("0", 0, ""), ("3", 3, ""), ("!stopped", 1, "!stopped\n")):
        result = subprocess.run(
            [sys.executable, "-m", "zerolab.rank.megatron_entry", str(script), argument],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (result.returncode, result.stdout, result.stderr) == (status, "", stderr)
