"""Whether the engine's CUDA builds are needed (zerolab.engine.cuda), on this machine for real: a CPU
build of torch in the engine's Python, no GPU. Other machines, from the facts they report:
tests/unit/test_engine_cuda.py."""

from __future__ import annotations

from zerolab.engine import cuda
from zerolab.engine.doctor import probe_engine
from zerolab.engine.pins import load_pins


def test_on_this_cpu_machine_the_cuda_builds_are_not_needed(engine):
    # this machine's real probe, as doctor takes it: reused while the engine environment is unchanged
    probe = probe_engine(load_pins().python, cached=True)
    plan = cuda.plan(probe, cuda.query_gpus(), None)
    assert probe["cuda_version"] is None and plan.needed is False and plan.problem is None
    assert "CPU build" in plan.reason and "the engine trains on CPU" in plan.reason
