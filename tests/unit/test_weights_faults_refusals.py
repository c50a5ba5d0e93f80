"""Hugging Face weights that cannot be reached, given to `zerolab import`, `eval` and `generate` as a
new user would (issue 40): a model path that does not exist, a hub name where the hub cannot be
reached, an --out under a file: each refused at once, with exit status 2 and one error naming it and
the fix. Weights that cannot be used as they are: tests/engine/test_weights_faults.py."""

from __future__ import annotations

import pytest
from cli_helpers import run_zerolab

from zerolab.cli import main
from zerolab.rundir import RECIPE_END


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["eval", "exports/tiny", "--task", "wikitext", "--data", "sample"],
            "exports/tiny: no such folder; give a run directory",
        ),
        (["generate", "./tiny", "Hello"], "tiny: no such folder; give a run directory"),
        (
            ["eval", "openai-community/gpt2", "--task", "wikitext", "--data", "sample"],
            "openai-community/gpt2: no such folder here, and the Hugging Face hub cannot be reached from "
            "this machine",
        ),
        (
            ["generate", "gpt2", "Hello"],
            "gpt2: no such folder here, and the Hugging Face hub cannot be reached from this machine",
        ),
        (
            ["import", "openai-community/gpt2", "--out", "imported"],
            "MODEL openai-community/gpt2: no such directory here, and the Hugging Face hub cannot be "
            "reached from this machine",
        ),
    ],
)
def test_a_missing_path_or_an_unreachable_hub_fails_at_once_and_says_so_once(argv, said, no_hub, tmp_path):
    (tmp_path / "exports").mkdir()  # `exports/tiny`: a folder of an existing folder, not a hub name
    done, took = run_zerolab(argv, no_hub, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("zerolab: error:") == 1 and said in done.stderr, done.stderr
    assert "Retrying" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    if "hub cannot be reached" in said:
        assert "nor has this machine a copy in its Hugging Face cache" in done.stderr
    assert took < 15, took  # not huggingface_hub's retries (about 40 s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports"]


@pytest.mark.parametrize("command", ["import", "export"])
def test_an_out_under_a_file_is_refused_naming_the_file(command, tmp_path, capsys):
    source = tmp_path / "source"
    if command == "import":
        source.mkdir()  # refused before the model is read
    else:
        (source / "checkpoints" / "global_step4").mkdir(parents=True)
        (source / "run.json").write_text('{"name": "tiny"}')
        (source / "recipe.yaml").write_text(f"base: [model/gpt2-tiny]\n{RECIPE_END}\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main([command, str(source), "--out", str(notes / "model")]) == 2
    err = capsys.readouterr().err
    assert f"--out {notes / 'model'}: {notes} is a file, not a folder" in err and "Traceback" not in err
    assert notes.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "source",
    ]
