"""The typed summary row and the columns' registry name the same keys in the same order."""

from dataclasses import fields

import pytest

from zerolab.summarize.columns import ROW_KEYS
from zerolab.summarize.row import ROW_FIELDS, SummaryRow


def test_the_rows_fields_are_the_registrys_keys_in_its_order():
    assert ROW_FIELDS == ROW_KEYS
    assert tuple(field.name for field in fields(SummaryRow)) == ROW_KEYS


def test_a_row_is_read_by_the_registrys_keys_and_no_other():
    row = SummaryRow(**dict.fromkeys(ROW_KEYS))
    row.status = "completed"
    assert row["status"] == "completed"
    assert [key for key, _ in row.items()] == list(ROW_KEYS)
    with pytest.raises(KeyError):
        row["no_such_column"]
