"""model.attention=sdpa trains the tiny GPT-2 on the real engine (CPU, 2 ranks over gloo, no
dropout) to the loss of the engine's own attention, iteration by iteration: with micro batch 2
(the strided q/k/v of several sequences) and with tensor parallel 2 (each rank half the heads).
The engine's attention is the session's shared run of the same recipe and overrides
(engine_runs.SHARED_RUNS), so each case launches only sdpa (with speed switches turned: CASES); one
attention call's forward and backward are compared with the engine's in
tests/engine/test_engine_launch_patches_real.py. Skipped, with the reason, when the engine is not
set up (`make setup`)."""

from __future__ import annotations

import pytest
from engine_runs import ITERATIONS, SHARED_RUNS, train

from zerolab.contracts import SWITCH_NAMES, SWITCHES

EQUAL = [switch.name for switch in SWITCHES if switch.equal]

CASES = {
    "micro batch 2, data parallel 2": ("z0", "speed.compiled_elementwise=true"),
    "tensor parallel 2, micro batch 2": ("tp2", *(f"speed.{name}=false" for name in EQUAL)),
}
"""Each case: the shared run whose setup sdpa trains in, and the speed switches it turns, each of
which must leave the losses as they are too (tests/engine/test_speed_engine.py): compiled_elementwise
on (off by default; on a GPU it was slower than eager, and with dropout its draws are not the
engine's: here there is none), and every switch proven equal off, under tensor parallel (where
async_batch_copy falls back to the engine's broadcast). One launch proves both."""
TOLERANCE = 1e-5
"""On this CPU (fp32, one thread a rank) both attentions log the same losses; 1e-5 is one unit of
the log's last digit."""


@pytest.mark.parametrize(
    ("shared", "switches"), [(run, turned) for run, *turned in CASES.values()], ids=list(CASES)
)
def test_sdpa_trains_to_the_loss_of_the_engines_attention(trained, dataset, tmp_path, shared, switches):
    megatron = trained(shared)
    recipe, *overrides = SHARED_RUNS[shared]
    sdpa = train(dataset, tmp_path / "sdpa", recipe, *overrides, "model.attention=sdpa", *switches)
    assert "zerolab: patch sdpa_attention" in sdpa.text
    assert "zerolab: patch sdpa_attention" not in megatron.text
    assert all(f"zerolab: switch {name}:" in megatron.text for name in EQUAL)
    on = {name for name in SWITCH_NAMES if f"zerolab: switch {name}:" in sdpa.text}
    assert on == ({"compiled_elementwise", *EQUAL} if shared == "z0" else set()), on
    for run in (megatron, sdpa):
        assert run.args["attention_dropout"] == run.args["hidden_dropout"] == 0, run.run_dir
    expected, got = megatron.log.iterations, sdpa.log.iterations
    assert list(expected["iteration"]) == list(got["iteration"]) == [float(i + 1) for i in range(ITERATIONS)]
    differences = [abs(a - b) for a, b in zip(megatron.losses, sdpa.losses, strict=True)]
    assert max(differences) <= TOLERANCE, differences
    assert megatron.losses[-1] < megatron.losses[0] - 0.03  # it trained
