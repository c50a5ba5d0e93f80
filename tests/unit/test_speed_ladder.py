"""The speed ladder's plan and its tables, without the engine: which phases it runs and in what
order, how a plan travels to the ranks, how a profile is summarised (GPU busy time as the union of
kernel intervals, kernel classes) and where a sync is attributed. The ladder on the real engine:
tests/engine/test_speed_engine.py."""

from __future__ import annotations

import traceback

import pytest

from zerolab.commands.ladder import ladder_plan
from zerolab.contracts import SWITCHES, Phase, Plan, plan_text
from zerolab.engine.ladder_phases import EVERY_SWITCH, standard_phases
from zerolab.errors import UserError
from zerolab.rank.speed_ladder import call_site, kernel_class, ladder_markdown, read_plan, summarise_kernels

EQUAL = [switch.name for switch in SWITCHES if switch.equal]
OTHER = [switch.name for switch in SWITCHES if not switch.equal]


def test_the_standard_phases_add_each_switch_then_all_then_leave_each_out():
    phases = standard_phases()
    assert [p.name for p in phases[:2]] == ["engine as it is", "dropout 0"]
    assert phases[0].on == () and not phases[0].dropout_zero and phases[1].dropout_zero
    added = phases[2 : 2 + len(EQUAL)]
    assert [p.on for p in added] == [tuple(EQUAL[: i + 1]) for i in range(len(EQUAL))]
    others = phases[2 + len(EQUAL) : 2 + len(EQUAL) + len(OTHER)]
    assert [p.on for p in others] == [(*EQUAL, name) for name in OTHER]
    assert {"compiled_layers", "coalesced_grad_reduction"} <= set(OTHER)
    every = phases[2 + len(EQUAL) + len(OTHER)]
    assert every.name == EVERY_SWITCH and every.on == (*EQUAL, *OTHER)
    left_out = phases[3 + len(EQUAL) + len(OTHER) :]
    assert [set(EQUAL) - set(p.on) for p in left_out] == [{name} for name in EQUAL]
    assert [p.name for p in phases if p.inspect] == ["engine as it is", f"+ {EQUAL[-1]}", EVERY_SWITCH]
    assert all(p.dropout_zero for p in phases[1:])


def test_a_plan_travels_as_text_and_counts_its_iterations():
    plan = Plan(standard_phases(), "/tmp/out", warmup=1, measured=2, tokens_per_iteration=4096, rounds=2)
    assert read_plan(plan_text(plan)) == plan
    assert plan.iterations() == 2 * len(plan.phases) * 3 + 3 * 2  # three inspected phases: profile, census


def test_a_plan_naming_an_unknown_switch_or_no_plan_is_refused():
    bad = Plan((Phase("x", ("warp_drive",)),), "/tmp/out")
    with pytest.raises(ValueError, match="no speed switch warp_drive"):
        read_plan(plan_text(bad))
    with pytest.raises(ValueError, match="does not hold a ladder plan"):
        read_plan("{not json")


def test_the_ladder_launches_the_recipe_for_exactly_its_iterations(tmp_path):
    plan, words = ladder_plan(["cpu/tiny_z2", "train.iters=7"], 1, 2, 1, tmp_path)
    assert words[-1] == f"train.iters={plan.iterations()}" and "train.iters=7" in words
    assert plan.tokens_per_iteration == 8 * 128 // 2  # global batch x sequence / ranks
    with pytest.raises(UserError, match="--rounds 0"):
        ladder_plan(["cpu/tiny_z2"], 1, 2, 0, tmp_path)
    with pytest.raises(UserError, match="fine-tunes"):
        ladder_plan(["finetune/cpu/tiny_wnli_dp"], 1, 2, 1, tmp_path)


def test_gpu_busy_time_is_the_union_of_kernel_intervals():
    kernels = [  # microseconds
        ("ampere_bf16_s16816gemm", 0.0, 10_000.0),
        ("vectorized_elementwise_kernel<add>", 5_000.0, 12_000.0),  # overlaps the gemm: counted once
        ("flash_fwd_kernel", 20_000.0, 30_000.0),
        ("ncclDevKernel_AllReduce", 40_000.0, 45_000.0),
    ]
    summary = summarise_kernels(kernels, wall_us=100_000.0)
    assert summary["gpu_busy_pct"] == 27.0  # 12 + 10 + 5 of 100 ms
    assert summary["kernel_ms"] == 32.0
    assert set(summary["classes"]) == {"matmul", "elementwise", "attention", "communication"}
    assert summary["attention_kernels"] == ["flash_fwd_kernel"]
    assert summary["top_kernels"][0] == {"name": "ampere_bf16_s16816gemm", "calls": 1, "ms": 10.0}


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", "attention"),
        ("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNN", "matmul"),
        ("void multi_tensor_apply_kernel<adam>", "optimizer"),
        ("Memcpy DtoD (Device -> Device)", "copy"),
        ("void at::native::vectorized_elementwise_kernel<8, GeluCUDAKernelImpl>", "elementwise"),
        ("void at::native::reduce_kernel<128, 4>", "normalization, softmax, reduction"),
        ("some_kernel_nobody_names", "other"),
    ],
)
def test_kernel_classes(name, kind):
    assert kernel_class(name) == kind


def test_a_sync_is_attributed_to_the_engine_line_not_to_the_patch_it_passed_through():
    stack = [
        traceback.FrameSummary("/e/megatron/model/transformer.py", 1426, "forward"),
        traceback.FrameSummary("/z/zerolab/rank/speed_switches.py", 112, "scalar_tensor"),
        traceback.FrameSummary("/v/site-packages/torch/_tensor.py", 10, "__torch_function__"),
    ]
    assert call_site(stack) == "megatron/model/transformer.py:1426 forward"


def test_the_table_shows_each_phase_against_the_first():
    row = {
        "phase": "engine as it is", "on": [], "dropout_zero": False, "iterations": 2, "ms": [100.0, 110.0],
        "ms_median": 105.0, "ms_min": 100.0, "ms_max": 110.0, "tokens_per_s": 9752.4,
        "host_ms": dict.fromkeys(("forward", "backward", "step"), 1.0),
        "gpu_ms": dict.fromkeys(("forward", "backward", "step")), "peak_allocated_gib": None,
    }  # fmt: skip
    faster = row | {"phase": "+ manual_gc", "ms_median": 52.5, "ms_min": 50.0, "ms_max": 55.0}
    result = {
        "device": "cpu",
        "torch": "2.13.0",
        "plan": {"measured": 2, "warmup": 1, "rounds": 1},
        "phases": [row, faster],
        "inspections": {"engine as it is": {"syncs": {"note": "no CUDA device: the sync census needs one"}}},
    }
    text = ladder_markdown(result)
    assert "| engine as it is | 105.0 [100.0-110.0] | 1.00x | 9,752.4 | 1.0 / n/a |" in text
    assert "| + manual_gc | 52.5 [50.0-55.0] | 0.50x |" in text
    assert "Syncs: no CUDA device: the sync census needs one." in text
