"""The image's build steps (zerolab.engine.container) that run without a GPU."""

from __future__ import annotations

from zerolab.engine.container import (
    canonical_name,
    image_requirements,
    main,
    relax_constraints,
    requirement_name,
)
from zerolab.engine.pins import load_pins

# The shape of NGC's /etc/pip/constraint.txt: one `name==version` a line.
NGC_CONSTRAINTS = """\
numpy==1.26.4
torch==2.8.0a0+5228986c39.nv25.6
PyYAML==6.0.2
pydantic_core==2.33.2
rich==13.9.4
# build tools
setuptools==78.1.1
"""


def test_image_requirements_are_the_pins_without_torch():
    requirements = image_requirements()
    pins = load_pins()
    assert "deepspeed==" + pins.python["deepspeed"] in requirements
    assert not any(line.startswith("torch==") for line in requirements)
    assert len(requirements) == len(pins.python) - 1


def test_requirement_names_compare_as_pip_does():
    assert requirement_name("PyYAML==6.0.2") == "pyyaml"
    assert requirement_name("pydantic_core>=2 ; python_version>'3'") == "pydantic-core"
    assert requirement_name("transformers[torch]==5.23.0") == "transformers"
    assert requirement_name("# comment") is None
    assert requirement_name("-r other.txt") is None
    assert canonical_name("Zope.Interface") == "zope-interface"


def test_relax_drops_only_the_constraints_on_pinned_packages():
    text, dropped = relax_constraints(NGC_CONSTRAINTS, {"numpy", "pyyaml", "rich"})
    assert dropped == ["numpy==1.26.4", "PyYAML==6.0.2", "rich==13.9.4"]
    assert "torch==2.8.0a0+5228986c39.nv25.6\n" in text
    assert "pydantic_core==2.33.2\n" in text
    assert "# build tools\n" in text


def test_relax_constraints_rewrites_the_file(tmp_path, capsys):
    constraints = tmp_path / "constraint.txt"
    constraints.write_text(NGC_CONSTRAINTS)
    requirements = tmp_path / "requirements-engine.txt"
    assert main(["requirements", str(requirements)]) == 0
    assert main(["relax-constraints", str(constraints), str(requirements)]) == 0
    assert "numpy==" not in constraints.read_text()
    assert "torch==2.8.0a0" in constraints.read_text()
    assert "dropped 1 constraint(s)" in capsys.readouterr().out


def test_relax_without_a_constraint_file_changes_nothing(tmp_path, capsys):
    requirements = tmp_path / "r.txt"
    requirements.write_text("numpy==2.4.6\n")
    assert main(["relax-constraints", str(tmp_path / "absent.txt"), str(requirements)]) == 0
    assert "nothing to relax" in capsys.readouterr().out


def test_check_engine_accepts_only_the_pinned_commit(capsys):
    pins = load_pins()
    assert main(["check-engine", pins.engine_repo, pins.engine_commit]) == 0
    assert main(["check-engine", pins.engine_repo, "0" * 40]) == 1
    assert "pins.toml" in capsys.readouterr().err
