"""The estimate against every measured run (tests/fixtures/estimate/measured.csv), and the
generated tables of docs/estimate.md are current."""

from __future__ import annotations

import pytest
from benchmark_helpers import load_benchmark

from zerolab.estimate import estimate
from zerolab.estimate.buffers import ALLOCATOR_HEADROOM, FSDP2_CPU_PROCESS_GIB

calibration = load_benchmark("estimate_calibration")
TARGET, main, measured_cases, median_reserve = (
    calibration.TARGET,
    calibration.main,
    calibration.measured_cases,
    calibration.median_reserve,
)

CASES = {case.name: case for case in measured_cases()}
FSDP2_CASES = {case.name: case for case in calibration.fsdp2_cases()}


def test_every_measured_source_is_a_case():
    assert len(CASES) >= 6
    assert any(case.recipe.parallel.pipeline > 1 for case in CASES.values()), "a real log's run"


@pytest.mark.parametrize("name", sorted(CASES))
def test_predicted_peak_within_target_of_measured(name):
    case = CASES[name]
    predicted = estimate(case.recipe).gpu_peak_gib
    assert abs(predicted - case.measured_gib) <= TARGET * case.measured_gib, (predicted, case.measured_gib)


def test_measured_host_memory_within_target_or_over_predicted():
    # one constant cannot fit both host measurements (buffers.HOST_PROCESS_GIB): the offload run
    # is held to the target, and no run may need more host memory than predicted
    with_host = [case for case in CASES.values() if case.measured_host_gib is not None]
    assert len(with_host) >= 2
    for case in with_host:
        predicted = estimate(case.recipe).host_peak_gib()
        assert predicted >= (1 - TARGET) * case.measured_host_gib, case.name
        if case.recipe.zero.offload_optimizer:
            assert abs(predicted - case.measured_host_gib) <= TARGET * case.measured_host_gib, case.name


def test_zero_stages_order_as_measured_on_the_h100():
    """ZeRO-1 above ZeRO-0 (its buckets live through the forward passes), ZeRO-3 + offload lowest."""
    peak = {
        name: estimate(case.recipe).gpu_peak_gib for name, case in CASES.items() if name.startswith("h100")
    }
    assert peak["h100_124m_z1_micro4"] > peak["h100_124m_z0_micro4"] + 1.5
    assert min(peak, key=peak.get) == "h100_124m_z3_offload_micro4"


@pytest.mark.parametrize("name", sorted(name for name, case in FSDP2_CASES.items() if not case.tiny))
def test_fsdp2_host_peak_on_cpu_within_target_of_measured(name):
    """GPT-2 124M's shape under each FSDP2 setup: the node's predicted peak against its process tree's
    (the tiny runs set the process constant, so they check nothing)."""
    case = FSDP2_CASES[name]
    predicted = estimate(case.recipe).host_peak_gib()
    assert abs(predicted - case.measured_host_gib) <= TARGET * case.measured_host_gib, (
        predicted,
        case.measured_host_gib,
    )


def test_fsdp2_process_constant_is_what_the_tiny_runs_imply():
    assert sum(case.tiny for case in FSDP2_CASES.values()) == 4
    assert round(calibration.implied_fsdp2_process_gib(), 2) == FSDP2_CPU_PROCESS_GIB


def test_fsdp2_setups_order_on_cpu_as_measured():
    """DDP above fully_shard with weights kept above resharded: the estimate and the runs agree."""
    big = [case for case in FSDP2_CASES.values() if not case.tiny and "offload" not in case.name]
    by_measured = sorted(big, key=lambda case: case.measured_host_gib)
    assert by_measured == sorted(big, key=lambda case: estimate(case.recipe).host_peak_gib())
    assert [case.recipe.zero.stage for case in by_measured] == [3, 2, 0]


def test_allocator_headroom_is_the_median_of_the_real_logs():
    assert round(median_reserve() - 1, 2) == ALLOCATOR_HEADROOM


def test_doc_tables_are_current():
    assert main(["--check"]) == 0, "docs/estimate.md is stale: run `make docs`"
