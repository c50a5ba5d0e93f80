"""model.init_from given a Hugging Face folder or its weights file suggests an import that works, on
the real engine. What import and init_from refuse: tests/unit/test_import_checks.py."""

from __future__ import annotations

import shlex
from pathlib import Path

from zerolab.cli import main
from zerolab.locations import REPO_ROOT


def _init_from_hint(given: Path, dataset: str, capsys) -> str:
    """What render warns of model.init_from=`given`."""
    argv = [
        "render",
        str(REPO_ROOT / "recipes" / "cpu" / "tiny_dp.yaml"),
        f"data.path={dataset}",
        f"model.init_from={given}",
    ]
    assert main([*argv, "model.make_vocab_size_divisible_by=1"]) == 0
    return "\n".join(line for line in capsys.readouterr().err.splitlines() if "model.init_from" in line)


def test_init_from_a_hugging_face_folder_or_its_file_suggests_an_import_that_works(
    hf_model, dataset, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    for given in (hf_model, hf_model / "model.safetensors"):
        said = _init_from_hint(given, dataset, capsys)
        if given.is_file():
            assert said.count(str(given)) == 1, said  # named once, not as a folder to write into
        command = f"zerolab import {hf_model} --out imports/tiny-gpt2"
        assert f"{hf_model} is a Hugging Face model folder: import it with `{command}`" in said, said
        assert "and set model.init_from=imports/tiny-gpt2" in said, said
    assert main(shlex.split(command)[1:]) == 0  # the command given works as given
    assert _init_from_hint(Path("imports/tiny-gpt2"), dataset, capsys) == ""
