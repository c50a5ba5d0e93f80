"""The run's setup that a row's config columns show: one typed record (logs.settings.LogSettings,
run.json's facts and the few only a log states), each fact from run.json where it states it, else
from the log; a fact nobody states stays None."""

from __future__ import annotations

from zerolab.logs.parse import ParsedLog
from zerolab.logs.settings import LogSettings, read_settings
from zerolab.recipe.compose import model_name_of_shape
from zerolab.recipe.setups import setup_label as label_of_setup
from zerolab.recipe.setups import zero_variant
from zerolab.rundir import RunFacts


def run_setup(run: RunFacts | None, log: ParsedLog) -> LogSettings:
    """The run's setup: each fact run.json states (neither null nor empty text), else the log's; the
    model, where run.json does not name it, the configs/model/ block the log's shape matches."""
    stated = read_settings(log)
    setup = stated.model_copy(update={key: value for key, value in run or () if value not in (None, "")})
    if not setup.model:
        shape = {
            "num_layers": setup.num_layers,
            "hidden_size": setup.hidden_size,
            "num_attention_heads": stated.num_attention_heads,
            "max_position_embeddings": stated.max_position_embeddings,
        }
        setup.model = model_name_of_shape(shape)
    return setup


def offloaded(setup: RunFacts) -> bool | None:
    """The `offload` column: True when the optimizer or the weights go to the CPU, None when neither
    is stated, else False."""
    offloads = (setup.offload_optimizer, setup.offload_param)
    if any(offloads):
        return True
    return None if all(offload is None for offload in offloads) else False


def setup_label(setup: RunFacts) -> str | None:
    """recipe.setups' label of the run's setup (`z0` ... `z3_offload_param`, `tp2_pp4_z1`); None
    when the ZeRO stage is not known."""
    if setup.zero_stage is None:
        return None
    return label_of_setup(
        setup.zero_stage,
        offloaded(setup),
        setup.offload_param,
        setup.tensor_parallel,
        setup.pipeline_parallel,
        zero_variant(setup),
    )
