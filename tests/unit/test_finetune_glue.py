"""The GLUE tasks' table: a task is found by its name in any case, a misspelt one is refused with the
closest name, and the table's facts are what the fine-tuning loop and GLUE's scoring rely on."""

from __future__ import annotations

import pytest

from zerolab.contracts import GLUE_TASKS as TASKS
from zerolab.errors import UserError
from zerolab.finetune.glue import glue_task


def test_a_task_is_found_by_its_name_in_any_case():
    assert glue_task("MRPC") is TASKS["mrpc"]
    assert glue_task("stsb").is_regression and not glue_task("cola").is_regression


@pytest.mark.parametrize(
    ("wrong", "said"), [("mrcp", "did you mean `mrpc`?"), ("squad", "GLUE's tasks: cola, sst2")]
)
def test_a_task_glue_does_not_have_is_refused_with_the_closest_name(wrong, said):
    with pytest.raises(UserError) as raised:
        glue_task(wrong, where="finetune.task")
    assert str(raised.value).startswith(f"finetune.task: no GLUE task `{wrong}`") and said in str(
        raised.value
    )


def test_mnli_is_scored_on_both_its_validation_sets_and_stsb_by_correlation():
    assert TASKS["mnli"].eval_splits == ("validation_matched", "validation_mismatched")
    assert TASKS["mnli"].num_labels == 3
    assert TASKS["stsb"].metrics == ("pearson", "spearmanr") and TASKS["stsb"].num_labels == 1
    assert len(TASKS) == 9
