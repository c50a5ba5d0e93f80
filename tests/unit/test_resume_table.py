"""Resuming under another setup, without the engine: which setup changes the universal checkpoint
carries (zerolab.recipe.resumption's table, walked over every pair of setups a recipe allows and
held against docs/resume.md), what `render --resume` shows for one, the refusals before launch,
and a sweep continuing one run under several setups (its dry run)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from zerolab import rundir
from zerolab.cli import main
from zerolab.errors import UserError
from zerolab.estimate.runs import estimated_peak_gib
from zerolab.logs.parse import ParsedLog
from zerolab.recipe.checks import check_recipe
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.facts import run_facts
from zerolab.recipe.output import resolved_yaml
from zerolab.recipe.resumption import CHANGES, DOC_FILE, change_of, current_doc, resume_problems, setup_of
from zerolab.recipe.yaml_io import read_yaml_mapping
from zerolab.sweep.cells import expand
from zerolab.sweep.plan import plan_of, write_plan

ZERO = ("dp", "z1", "z2", "z3", "z3_offload")
SHORT = ["train.lr_warmup_iters=1"]


def setup_recipe(zero: str, dp: int, tp: int, pp: int):
    """The tiny CPU recipe under one setup, or None where the checks refuse it (ZeRO 2-3 with
    pipeline parallelism, for one)."""
    words = [f"parallel.tensor={tp}", f"parallel.pipeline={pp}", f"hardware.procs_per_node={dp * tp * pp}"]
    try:
        recipe = load_recipe(f"cpu/tiny_{zero}", [*SHORT, *words])
    except UserError:
        return None
    return None if check_recipe(recipe) else recipe


SETUPS = [
    recipe
    for zero, dp, tp, pp in itertools.product(ZERO, (1, 2), (1, 2), (1, 2))
    if (recipe := setup_recipe(zero, dp, tp, pp)) is not None
]


def test_every_pair_of_setups_falls_under_one_row_of_the_table():
    assert len(SETUPS) == 28  # ZeRO 2 and 3 refuse pipeline parallelism: 12 of the 40 setups
    decided = {change.name: 0 for change in CHANGES}
    for before, after in itertools.permutations(SETUPS, 2):
        change = change_of(before, after)
        stage = (before.zero.stage, after.zero.stage)
        if change is None:  # what a checkpoint holds is the same: it loads as it was saved
            assert setup_of(before).split()[0] == setup_of(after).split()[0] == "z0"
            continue
        decided[change.name] += 1
        family_changes = (stage[0] == 3) != (stage[1] == 3)
        model_parallel_changes = (before.parallel.tensor, before.parallel.pipeline) != (
            after.parallel.tensor,
            after.parallel.pipeline,
        )
        carried = 0 not in stage and not family_changes and not model_parallel_changes
        assert change.carried is carried, (setup_of(before), setup_of(after), change.name)
    assert all(decided[change.name] for change in CHANGES if "offload_param" not in change.name)


def test_the_docs_table_is_the_one_the_code_decides_with():
    assert DOC_FILE.read_text() == current_doc(), "docs/resume.md is stale: run `make docs`"


def test_a_refusal_names_both_setups_the_reason_and_how_to_start_over():
    before = load_recipe("cpu/tiny_z1", SHORT)
    same_vocabulary = "model.make_vocab_size_divisible_by=64"  # x tensor 2: the same padded rows
    after = load_recipe("cpu/tiny_z1", [*SHORT, "parallel.tensor=2", same_vocabulary])
    (problem,) = resume_problems(before, after, 20, "zerolab launch R")
    assert "of the tensor-parallel size (z1 dp2 tp1 pp1 -> z1 dp1 tp2 pp1)" in problem
    assert "TP 2 -> 1 stops at load" in problem and problem.endswith("start a new run: zerolab launch R")


@pytest.fixture
def saved_run(tmp_path, dataset) -> Path:
    """A run directory as a ZeRO-1 launch of the tiny model on 2 ranks leaves it, with a checkpoint
    at iteration 2 (its files, not the tensors: nothing here reads them)."""
    words = [*SHORT, f"data.path={dataset}", "train.iters=2", "train.save_interval=2"]
    recipe = load_recipe("cpu/tiny_z1", words)
    run_dir = tmp_path / "saved"
    (run_dir / rundir.CHECKPOINTS_DIR / "global_step2").mkdir(parents=True)
    rundir.write_recipe(run_dir, resolved_yaml(recipe))
    rundir.write_facts(run_dir, run_facts(recipe))
    (run_dir / rundir.CHECKPOINTS_DIR / rundir.LATEST_CHECKPOINT).write_text("2")
    return run_dir


def test_render_shows_the_conversion_then_the_universal_load(saved_run, capsys):
    assert main(["render", "--resume", str(saved_run), "train.iters=4", "hardware.procs_per_node=1"]) == 0
    text = capsys.readouterr().out
    conversion = f"python -m zerolab.rank.universal_checkpoint {{}} {saved_run / 'checkpoints'} 2 &&"
    engine_part = text.split("python -m zerolab.rank.universal_checkpoint ")[1].split(" ")[0]
    assert conversion.format(engine_part) in text
    assert text.index("zerolab.rank.universal_checkpoint") < text.index("--nproc-per-node")
    assert f"--load {saved_run / 'checkpoints'}" in text and "--universal-checkpoint" in text


def test_the_same_setup_resumes_as_before(saved_run, capsys):
    assert main(["render", "--resume", str(saved_run), "train.iters=4"]) == 0
    text = capsys.readouterr().out
    assert "universal" not in text and f"--load {saved_run / 'checkpoints'}" in text


def test_a_slurm_job_converts_once_then_records_where_it_came_from(saved_run, capsys):
    argv = ["render", "--resume", str(saved_run), "train.iters=4", "zero=z2", "--slurm"]
    assert main(argv) == 0
    script = capsys.readouterr().out
    assert "srun \\\n    --nodes=1 --ntasks=1" in script and 'bash -c "${first}"' in script
    assert "first='python -m zerolab.rank.universal_checkpoint" in script
    facts = json.loads(script.split("<<'ZEROLAB_RUN_JSON'\n")[1].split("ZEROLAB_RUN_JSON")[0])
    assert facts["resumed_from"] == str(saved_run.resolve())
    assert facts["resumed_iteration"] == 2 and facts["resumed_setup"] == "z1 dp2 tp1 pp1"


@pytest.mark.parametrize(
    ("overrides", "told"),
    [
        (["zero=z3"], "between ZeRO 1-2 and ZeRO-3 (z1 dp2 tp1 pp1 -> z3 dp2 tp1 pp1)"),
        (["zero=z0"], "to or from ZeRO stage 0 (z1 dp2 tp1 pp1 -> z0 dp2 tp1 pp1)"),
        (["parallel.pipeline=2", "hardware.procs_per_node=2"], "of the pipeline-parallel size"),
    ],
)
def test_a_change_the_engine_cannot_carry_is_refused_before_launch(
    saved_run, tmp_path, capsys, overrides, told
):
    run_dir = tmp_path / "continued"
    argv = ["launch", "--resume", str(saved_run), "train.iters=4", *overrides, "--run-dir", str(run_dir)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert told in error and "(measured)" in error
    assert not run_dir.exists()
    assert sorted(p.name for p in (saved_run / "checkpoints").iterdir()) == [
        "global_step2",
        "latest_checkpointed_iteration.txt",
    ]  # nothing converted


def test_a_run_without_a_checkpoint_is_refused(saved_run, capsys):
    (saved_run / rundir.CHECKPOINTS_DIR / rundir.LATEST_CHECKPOINT).unlink()
    assert main(["launch", "--resume", str(saved_run), "zero=z2"]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err


def test_a_sweep_continues_one_run_under_each_setup_refusing_what_the_table_refuses(
    saved_run, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr("zerolab.sweep.run.sweep_dir", lambda name: tmp_path / "sweeps" / name)
    argv = ["sweep", "--resume", str(saved_run), "zero=z1,z2,z3", "train.iters=4", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "saved-resumed-zero" in out
    cells = {line.split()[1]: line for line in out.splitlines() if line.split()[1:2] and "zero-" in line}
    assert cells["zero-z1"].endswith(" ok") and cells["zero-z2"].endswith(" ok")
    assert "refused" in cells["zero-z3"] and "between ZeRO 1-2 and ZeRO-3" in out
    assert "would run 2 cell(s); 1 refused" in out


def test_a_sweep_with_resume_takes_no_recipe(saved_run, capsys):
    assert main(["sweep", "--resume", str(saved_run), "cpu/tiny_z1", "zero=z1,z2"]) == 2
    assert (
        "give only KEY=V1,V2,... and KEY=VALUE words, not the recipe `cpu/tiny_z1`" in capsys.readouterr().err
    )


@pytest.mark.parametrize("command", [["launch"], ["sweep"]], ids=["launch", "sweep"])
@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("missing", "no such folder ({path} does not exist)"),
        ("file", "a file, not a run directory"),
        ("folder", "not a run directory (no recipe.yaml)"),
    ],
)
def test_resume_of_a_path_that_is_no_run_directory_says_what_it_is(command, given, message, tmp_path, capsys):
    path = tmp_path / given
    if given == "file":
        path.write_text("notes\n")
    elif given == "folder":
        path.mkdir()
    assert main([*command, "--resume", str(path), "zero=z1,z2"]) == 2
    error = capsys.readouterr().err
    assert f"--resume {path}: {message.format(path=path)}; give a run directory zerolab launch wrote" in error


def test_a_latest_checkpoint_file_cut_short_is_named_as_such(saved_run, capsys):
    (saved_run / rundir.CHECKPOINTS_DIR / rundir.LATEST_CHECKPOINT).write_text("")
    assert main(["launch", "--resume", str(saved_run), "zero=z2"]) == 2
    error = capsys.readouterr().err
    assert "latest_checkpointed_iteration.txt holds no iteration number: cut short?" in error
    assert "is missing" not in error


def test_a_sweep_resuming_a_run_without_swept_keys_says_what_to_give(saved_run, capsys):
    # argparse answered "the following arguments are required: RECIPE", where --resume takes none
    assert main(["sweep", "--resume", str(saved_run)]) == 2
    error = capsys.readouterr().err
    assert f"--resume {saved_run}: nothing to sweep; give at least one KEY=V1,V2,..." in error
    assert f"zerolab sweep --resume {saved_run} zero=z1,z2" in error
    assert f"zerolab launch --resume {saved_run}" in error
    assert main(["sweep"]) == 2
    assert "give a RECIPE and at least one KEY=V1,V2,..." in capsys.readouterr().err


def test_a_sweep_directory_given_to_resume_is_told_apart_with_its_command(saved_run, tmp_path, capsys):
    directory = tmp_path / "sweeps" / "study"
    directory.mkdir(parents=True)
    sweep = expand(str(saved_run / rundir.RECIPE_FILE), ["zero=z1,z2", "train.iters=4"])
    write_plan(directory, plan_of(sweep, "study", "saved/recipe.yaml", str(saved_run)))
    for words in ([], ["zero=z1,z2"]):
        assert main(["sweep", "--resume", str(directory), *words]) == 2
        error = capsys.readouterr().err
        assert f"--resume {directory}: a sweep's directory, not a run directory" in error
        assert f"zerolab sweep zero=z1,z2 train.iters=4 --resume {saved_run} --name study" in error


def cut_recipe(run_dir: Path) -> int:
    """Cut the run's recipe.yaml at a line boundary in its middle, where it is still valid YAML (the
    keys after the cut would take their defaults); the lines left."""
    path = run_dir / rundir.RECIPE_FILE
    lines = path.read_text().splitlines(keepends=True)
    kept = lines[: lines.index("train:\n")]
    path.write_text("".join(kept))
    assert isinstance(read_yaml_mapping(path)["model"], dict)
    return len(kept)


@pytest.mark.parametrize(
    "argv",
    [["launch", "--resume", "{run}", "zero=z2"], ["sweep", "--resume", "{run}", "zero=z1,z2", "--dry-run"],
     ["render", "--resume", "{run}"], ["export", "{run}", "--out", "{run}/exported"],
     ["eval", "{run}", "--task", "val"]],
    ids=["launch", "sweep", "render", "export", "eval"],
)  # fmt: skip
def test_a_recipe_yaml_cut_at_a_line_is_refused_by_every_command_that_reads_it(saved_run, capsys, argv):
    kept = cut_recipe(saved_run)
    assert main([word.format(run=saved_run) for word in argv]) == 2
    error = capsys.readouterr().err
    assert (
        f"{saved_run / 'recipe.yaml'}: cut short (its last line is not `# end of the resolved recipe`"
        in error
    )
    assert f"{kept} line(s) left): copy the run directory again" in error
    assert "or launch its recipe anew: zerolab launch " in error


def test_summarize_names_a_cut_recipe_yaml_where_the_estimate_would_be(saved_run):
    cut_recipe(saved_run)
    _, reason = estimated_peak_gib(saved_run, ParsedLog(saved_run / "train.log"))
    assert reason.startswith("recipe.yaml does not load: ") and "cut short" in reason


def test_every_resolved_recipe_ends_with_the_line_a_cut_one_lacks(saved_run):
    assert (saved_run / rundir.RECIPE_FILE).read_text().endswith(f"\n{rundir.RECIPE_END}\n")
    assert rundir.whole_recipe(saved_run) == saved_run / rundir.RECIPE_FILE
