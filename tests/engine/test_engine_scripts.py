"""engine/scripts.run_engine_script: a script in the engine's Python says why it failed on a
`zerolab NAME:` line, which becomes the UserError whole, also where the script's output splits a
character between two reads. Skipped, with the reason, without the engine."""

from __future__ import annotations

import pytest

from zerolab.engine.scripts import run_engine_script
from zerolab.errors import UserError

SAYS = """
import sys
sys.stderr.write("zerolab probe: " + "a" * 4080 + "█ ends here\\n")
sys.exit(2)
"""


def test_the_scripts_own_line_is_the_error_with_every_character_whole(engine, tmp_path):
    script = tmp_path / "says.py"
    script.write_text(SAYS, encoding="utf-8")
    with pytest.raises(UserError) as refused:
        run_engine_script(script, {}, tmp_path, name="probe")
    # "zerolab probe: " and 4080 a's are 4095 bytes: the 3 bytes of █ straddle the first 4096-byte read
    assert str(refused.value) == "a" * 4080 + "█ ends here"
    assert not (tmp_path / "request.json").exists()
