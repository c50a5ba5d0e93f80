"""The image's build steps (zerolab.engine.container) that run without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

from zerolab.engine.container import (
    DEEPSPEED_OPS,
    canonical_name,
    deepspeed_build_env,
    image_constraints,
    image_requirements,
    main,
    relax_constraints,
    requirement_name,
)
from zerolab.engine.install import CPU_OPS
from zerolab.engine.locks import ENGINE_LOCK, lock_lines
from zerolab.engine.pins import load_pins
from zerolab.locations import REPO_ROOT

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


def test_image_constraints_are_the_engine_lock_without_torch(tmp_path):
    """What the pins need, at the lock's versions, as `make setup`'s pip has them; torch is the
    base image's (a constraint on it would make pip replace NGC's build)."""
    constraints = image_constraints()
    assert not any(requirement_name(line) == "torch" for line in constraints)
    assert len(constraints) == len(lock_lines(ENGINE_LOCK)) - 1
    assert f"deepspeed=={load_pins().python['deepspeed']}" in constraints
    out = tmp_path / "constraints-engine.txt"
    assert main(["constraints", str(out)]) == 0
    assert out.read_text().splitlines() == constraints


def test_deepspeed_builds_the_ops_a_run_on_each_accelerator_loads():
    """On CPU the ops `make setup` JIT-builds (CPU_OPS), prebuilt in the twin instead; the CUDA
    ops as before. Everything else stays JIT (DS_BUILD_OPS=0)."""
    assert set(DEEPSPEED_OPS["cpu"]) == set(CPU_OPS)
    assert set(DEEPSPEED_OPS["cuda"]) == {"cpu_adam", "fused_adam"}
    assert deepspeed_build_env("cpu") == {
        "DS_ACCELERATOR": "cpu",
        "DS_BUILD_OPS": "0",
        "DS_BUILD_CPU_ADAM": "1",
        "DS_BUILD_SHM_COMM": "1",
    }
    assert deepspeed_build_env("cuda")["DS_BUILD_FUSED_ADAM"] == "1"


def test_with_deepspeed_ops_runs_the_command_with_the_build_variables():
    show = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('DS_')}))"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "zerolab.engine.container",
            "with-deepspeed-ops",
            "cpu",
            sys.executable,
            "-c",
            show,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout) == deepspeed_build_env("cpu")
