"""install.json: what `zerolab engine install` set up (the pins, the source, the builds), written
by install and read by install (to skip what is done) and doctor."""

from __future__ import annotations

import json
from typing import Any

from zerolab.engine.paths import install_record
from zerolab.files import write_json_atomic


def read_record() -> dict | None:
    """The last install's record (with `source`, `installed_at`, `zerolab_version`), or None."""
    try:
        return json.loads(install_record().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_record(record: dict[str, Any]) -> None:
    """Write the install's record, whole."""
    install_record().parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(install_record(), record)
