"""The locks in requirements/ (`make lock`): every environment installs exact, tested versions, and
no package has two versions between them and pins.toml, which owns the engine stack's."""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement

from zerolab.engine.container import canonical_name
from zerolab.engine.locks import DEV_LOCK, ENGINE_LOCK, ZEROLAB_LOCK, lock_lines
from zerolab.engine.pins import load_pins

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

LOCKS = (DEV_LOCK, ZEROLAB_LOCK, ENGINE_LOCK)


def _versions(path) -> dict[str, set[str]]:
    """canonical name -> the versions the lock holds (two where a marker splits them)."""
    found: dict[str, set[str]] = {}
    for line in lock_lines(path):
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{path.name}: {line}: not an exact version"
        found.setdefault(canonical_name(requirement.name), set()).add(specifier.version)
    return found


def _applies(line: str) -> Requirement | None:
    requirement = Requirement(line)
    return requirement if requirement.marker is None or requirement.marker.evaluate() else None


def test_pins_toml_owns_the_engine_stack_and_no_package_has_two_versions():
    locks = {path.name: _versions(path) for path in LOCKS}
    for name, version in load_pins().python.items():
        assert locks["engine.txt"][canonical_name(name)] == {version}, name
    names = {name for versions in locks.values() for name in versions}
    for name in names:
        held = {lock: versions[name] for lock, versions in locks.items() if name in versions}
        assert len({frozenset(v) for v in held.values()}) == 1, f"{name}: {held}"


def test_every_dependency_of_pyproject_is_locked_within_its_range():
    project = tomllib.loads((DEV_LOCK.parent.parent / "pyproject.toml").read_text())["project"]
    wanted = {
        ZEROLAB_LOCK: project["dependencies"],
        DEV_LOCK: project["dependencies"] + project["optional-dependencies"]["dev"],
    }
    for lock, dependencies in wanted.items():
        versions = _versions(lock)
        for line in dependencies:
            requirement = _applies(line)
            if requirement is None:
                continue
            held = versions.get(canonical_name(requirement.name), set())
            assert held and all(v in requirement.specifier for v in held), f"{lock.name}: {line}: {held}"


def test_the_dev_lock_gives_every_package_its_hashes():
    text = DEV_LOCK.read_text()
    entries = text.split("\n")
    starts = [i for i, line in enumerate(entries) if line and not line.startswith((" ", "#"))]
    assert len(starts) == len(lock_lines(DEV_LOCK))
    for start in starts:
        assert entries[start].endswith("\\") and "--hash=sha256:" in entries[start + 1], entries[start]


def test_this_environment_holds_the_dev_locks_versions():
    """`make dev` installs requirements/dev.txt: what the tests run on is what the lock says."""
    for line in lock_lines(DEV_LOCK):
        requirement = _applies(line)
        if requirement is None:
            continue
        (specifier,) = requirement.specifier
        assert metadata.version(requirement.name) == specifier.version, f"{line} (run: make dev)"
