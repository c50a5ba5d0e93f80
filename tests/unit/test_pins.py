import re

from zerolab.engine.pins import load_pins


def test_engine_and_apex_commits_are_full_shas():
    assert re.fullmatch(r"[0-9a-f]{40}", load_pins().engine_commit)
    assert re.fullmatch(r"[0-9a-f]{40}", load_pins().apex_commit)


def test_every_python_pin_is_exact():
    pins = load_pins()
    assert "deepspeed" in pins.python
    for line in pins.requirements():
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+-]*", line), line
