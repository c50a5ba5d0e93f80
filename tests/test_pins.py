import re

from zerolab.engine.pins import load_pins


def test_engine_commit_is_a_full_sha():
    assert re.fullmatch(r"[0-9a-f]{40}", load_pins().engine_commit)


def test_every_python_pin_is_exact():
    pins = load_pins()
    assert "deepspeed" in pins.python
    for line in pins.requirements():
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+-]*", line), line
