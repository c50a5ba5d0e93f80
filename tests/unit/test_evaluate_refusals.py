"""What `zerolab eval` refuses before any scoring: a run without a checkpoint, keeping no scores. The
scores themselves, on the real engine: tests/engine/test_evaluate_engine.py."""

from __future__ import annotations

from zerolab.cli import main
from zerolab.rundir import RECIPE_END


def test_a_run_without_a_checkpoint_is_refused_and_keeps_no_scores(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"name": "tiny"}')
    (run / "recipe.yaml").write_text(f"base: [model/gpt2-tiny]\n{RECIPE_END}\n")
    assert main(["eval", str(run), "--task", "wikitext", "--data", "sample"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert not (run / "eval.json").exists()
