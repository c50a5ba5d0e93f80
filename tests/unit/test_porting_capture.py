"""zerolab.porting.capture runs a launch script with stub launchers and records what it launches,
writing nothing outside its scratch folder (the upstream scripts themselves: tests/engine's
test_porting_upstream.py)."""

from __future__ import annotations

from pathlib import Path

from zerolab.porting.capture import capture_script

SCRIPT = """#!/bin/bash
set -e
NUM_GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
out="/zerolab-capture-test-nowhere/out"
mkdir -p ${out}
BASE=dataset
cat <<EOT > ${BASE}/ds.json
{"train_batch_size": 16, "zero_optimization": {"stage": 1}}
EOT
wget https://example.invalid/vocab.json
options="--num-layers 2 --data-path '0.5 a 0.5 b' --deepspeed_config=${BASE}/ds.json"
run_cmd="deepspeed --num_gpus ${NUM_GPUS} ../pretrain_gpt.py ${options} &> ${out}/log"
eval ${run_cmd}
python other_tool.py
"""


def test_a_script_is_run_at_its_defaults_and_its_launch_recorded(tmp_path):
    root = tmp_path / "checkout"
    (root / "examples").mkdir(parents=True)
    (root / "pretrain_gpt.py").write_text("")
    script = root / "examples" / "run.sh"
    script.write_text(SCRIPT)

    (launch,) = capture_script(script, root=root, gpus=4)

    assert launch.launcher[:3] == ["deepspeed", "--num_gpus", "4"]
    assert launch.launcher[-1].endswith("pretrain_gpt.py")
    assert launch.args[:2] == ["--num-layers", "2"]
    assert launch.ds_config == {"train_batch_size": 16, "zero_optimization": {"stage": 1}}
    assert not Path("/zerolab-capture-test-nowhere").exists()
    assert sorted(path.name for path in root.rglob("*")) == ["examples", "pretrain_gpt.py", "run.sh"]


def test_a_script_that_launches_nothing_captures_nothing(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("# deepspeed pretrain_gpt.py --num-layers 2\n")
    assert capture_script(script, root=tmp_path) == []
