"""`zerolab estimate` end to end: tables, --json, --gpu-memory with --plot, exit statuses; the
launch warning; the summarize column."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zerolab.cli import main
from zerolab.estimate.gpu import _visible, memory_warning
from zerolab.estimate.support import NEUTRAL_MEGATRON_ARGS
from zerolab.recipe.checks import declared_flags
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.output import resolved_yaml
from zerolab.rundir import RECIPE_FILE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def _json(capsys, *argv: str) -> dict:
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_peak_is_the_sum_of_its_parts(capsys):
    result = _json(capsys, "gpt2_z3_offload", "train.micro_batch_size=2")
    gpu, host = result["gpu_gib"], result["host_gib"]
    parts = {key: value for key, value in gpu.items() if key != "peak"}
    assert {"weights", "activations", "buckets"} <= set(parts)
    assert gpu["peak"] == pytest.approx(sum(parts.values()), abs=0.01)
    assert gpu["peak"] == max(result["phases_gib"].values())
    assert {"optimizer_states", "master_weights", "process"} <= set(host)
    assert host["peak"] == pytest.approx(
        sum(v for k, v in host.items() if k not in ("peak", "per_rank", "ranks"))
    )
    assert result["overrides"] == ["train.micro_batch_size=2"] and result["estimable"] is True
    traffic = result["traffic_per_step"]["data_parallel"]
    assert set(traffic) == {"1", "2", "8"} and traffic["1"]["bytes_per_rank_GB"]["all_gather"] == 0
    assert traffic["8"]["seconds"]["NVLink 4"] < traffic["8"]["seconds"]["PCIe Gen5 x16"]


def test_tables_name_every_part_and_the_traffic(capsys):
    seed_settings = [
        "activation_checkpointing=full",
        "model.attention=megatron",
    ]  # the step peaks at the optimizer
    assert main(["estimate", "gpt2_z1", *seed_settings, "--link-gbps", "400"]) == 0
    out = capsys.readouterr().out
    for text in (
        "end of forward",
        "optimizer step",
        "(peak)",
        "Adam moments",
        "reduce buckets",
        "logits and loss",
        "Host memory",
        "reduce-scatter",
        "ms at your link (50 GB/s)",
        "8",
    ):
        assert text in out


def test_gpu_memory_table_and_plot(tmp_path: Path, capsys):
    png = tmp_path / "fit.png"
    assert main(["estimate", "gpt2_z1", "--gpu-memory", "48", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Fits in 48 GiB per GPU?" in out and "ZeRO 3 + weight offload" in out and f"wrote {png}" in out
    assert "(global 64)" in out  # micro 32 on 2 GPUs cannot keep the global batch of 32
    assert png.read_bytes().startswith(PNG_MAGIC)
    fit = _json(capsys, "gpt2_z1", "--gpu-memory", "20")["fit"]
    assert fit["global_batch_by_micro_batch"] == {"1": 32, "2": 32, "4": 32, "8": 32, "16": 32, "32": 64}
    assert fit["current"] == {"setup": "z1", "micro_batch": 4}
    assert fit["setups"]["z0"]["32"]["status"] == "does not fit"
    assert fit["setups"]["z3_offload_param"]["1"]["status"] == "fits"


def test_unmodelled_recipe_exits_3_naming_the_setting(capsys):
    assert main(["estimate", "gpt2_z1", "extra.megatron_args=[--swiglu]"]) == 3
    assert "--swiglu" in capsys.readouterr().err
    assert main(["estimate", "gpt2_z1", "extra.megatron_args=[--swiglu]", "--json"]) == 3
    result = json.loads(capsys.readouterr().out)
    assert result["estimable"] is False and result["gpu_gib"] is None and "--swiglu" in result["reasons"][0]


def test_the_flags_the_estimate_passes_as_neutral_are_ones_extra_can_carry(capsys):
    declared = declared_flags()
    assert [flag for flag in sorted(NEUTRAL_MEGATRON_ARGS) if flag in declared] == []
    assert main(["estimate", "gpt2_z1", "extra.megatron_args=[--log-params-norm]", "--json"]) == 0


def test_experts_and_a_teacher_are_named_as_what_the_estimate_does_not_model(capsys):
    experts = ["moe.num_experts=8", "moe.expert_parallel=2", "moe.param_group=true"]
    assert main(["estimate", "gpt2_z1", *experts, "--json"]) == 3
    (reason,) = json.loads(capsys.readouterr().out)["reasons"]
    assert reason.startswith("moe.num_experts [8]: the estimate does not model mixture of experts")
    assert main(["estimate", "gpt2_z1", "moe.loss_coeff=0.01", "--json"]) == 0  # dense: estimated
    capsys.readouterr()
    teacher = ["distillation.teacher=t", "distillation.teacher_num_layers=12"]
    teacher += ["distillation.teacher_hidden_size=768", "distillation.teacher_num_attention_heads=12"]
    assert main(["estimate", "gpt2_z1", "distillation.kd=true", *teacher, "--json"]) == 3
    (reason,) = json.loads(capsys.readouterr().out)["reasons"]
    assert reason.startswith("distillation: the estimate does not model the teacher")


@pytest.mark.parametrize(
    "argv",
    [
        ["gpt2_z1", "--plot", "x.png"],
        ["gpt2_z1", "--gpu-memory", "48", "--plot", "x.txt"],
        ["gpt2_z1", "--gpu-memory", "-4"],
        ["gpt2_z1", "zero.stage=7"],
        ["no_such_recipe"],
    ],
)
def test_bad_input_exits_2(argv, capsys):
    try:
        code = main(["estimate", *argv])
    except SystemExit as exit_info:  # argparse refuses the option itself
        code = exit_info.code
    assert code == 2
    assert "error" in capsys.readouterr().err


def test_launch_warning_when_the_estimate_exceeds_the_gpu():
    recipe = load_recipe("gpt2_dp", [])
    warning = memory_warning(recipe, [16.0, 16.0], "NVML")
    assert warning and "16.0 GiB (NVML)" in warning and "will likely run out of memory" in warning
    assert memory_warning(recipe, [80.0, 80.0], "NVML") is None
    assert memory_warning(recipe, [], "NVML") is None, "no GPU visible: nothing to compare"
    assert memory_warning(load_recipe("cpu/tiny_dp", []), [1.0], "NVML") is None, "CPU: nothing to compare"


def test_summarize_puts_the_estimate_next_to_the_measured_memory(tmp_path: Path, capsys):
    log = LOGS / "real" / "megatronds_2021-meg24-3d-pp16-full-run.log"
    for name, spec, overrides in (
        ("gpt2_z3", "gpt2_z3", ["model=gpt2-124m"]),
        ("tiny_z3", "cpu/tiny_z3", []),
    ):
        run_dir = tmp_path / name / "20260101-000000"
        run_dir.mkdir(parents=True)
        shutil.copy(LOGS / "cpu-engine" / "final_z3.log", run_dir / "train.log")
        (run_dir / RECIPE_FILE).write_text(resolved_yaml(load_recipe(spec, overrides)))
        (run_dir / "run.json").write_text(json.dumps({"name": name, "epoch_tokens": None}))
    assert (
        main(["summarize", str(log), str(tmp_path), "--out", str(tmp_path / "out"), "--format", "json"]) == 0
    )
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["runs"]}
    real = rows[log.stem]
    assert real["estimated_peak_GiB"] == pytest.approx(20.58, abs=0.01)
    expected = 100 * (real["estimated_peak_GiB"] - real["max_allocated_GiB"]) / real["max_allocated_GiB"]
    assert real["estimate_error_pct"] == pytest.approx(expected, abs=0.01)
    assert rows["gpt2_z3"]["estimated_peak_GiB"] is not None, "a run directory's recipe.yaml is estimated"
    assert rows["tiny_z3"]["estimated_peak_GiB"] is None
    assert any("a CPU run" in note for note in rows["tiny_z3"]["notes"])
    assert "20.6 (+5.6%)" in (tmp_path / "out" / "summary.md").read_text()


def test_a_length_in_epochs_needs_no_data(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/ here, whatever the checkout holds (make demo writes one)
    assert main(["estimate", "gpt2_z1", "train.iters=null", "train.epochs=1"]) == 0
    assert "iterations unknown until the data is prepared" in capsys.readouterr().out


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert _visible([80.0, 80.0, 40.0, 48.0], 4) == [40.0, 48.0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert _visible([80.0, 40.0], 1) == [80.0]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _visible([80.0, 40.0], 2) == [80.0, 40.0]
