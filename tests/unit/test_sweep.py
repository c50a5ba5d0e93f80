"""`zerolab sweep` without the engine: how words become cells (the comma rule, names, order), bad
input refused before anything is written, the dry run, resuming from the cells' states, a
directory holding another sweep, and the --slurm array job run under stand-ins for SLURM. The
sweep on the real engine: tests/engine/test_sweep_engine.py."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from slurm_helpers import launched, option, run_sbatch, shellcheck, stand_ins_bin

from zerolab import rundir
from zerolab.backends.local import LocalBackend
from zerolab.cli import main
from zerolab.errors import UserError
from zerolab.locations import REPO_ROOT, display_path
from zerolab.recipe.compose import load_recipe, resolve_recipe_path
from zerolab.recipe.render import render
from zerolab.summarize.collect import summarize_paths
from zerolab.summarize.summary import Options
from zerolab.summarize.sweep_plots import points, sweep_figure
from zerolab.sweep.cells import MAX_NAME, check_name, expand, split_values
from zerolab.sweep.plan import PLAN_FILE, locked, plan_of, read_plan, write_plan

DATA = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipe-data" / "dolly151_text_document")


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("z0,z1,z3_offload", ["z0", "z1", "z3_offload"]),
        ("1,2,4,8", ["1", "2", "4", "8"]),
        ("'98,2,0','90,10,0'", ["'98,2,0'", "'90,10,0'"]),
        ('"a,b",c', ['"a,b"', "c"]),
        ("[--a,--b],[--c]", ["[--a,--b]", "[--c]"]),
        ("{x: 1, y: 2},{x: 3}", ["{x: 1, y: 2}", "{x: 3}"]),
        ("'it''s,one'", ["'it''s,one'"]),
        ("[unclosed,a", ["[unclosed,a"]),
        ("plain", ["plain"]),
    ],
)
def test_values_split_at_top_level_commas_only(text, values):
    assert split_values(text) == values


def test_cells_are_the_product_in_the_order_given_with_the_words_in_order():
    sweep = expand("cpu/tiny_dp", ["zero=z0,z3_offload", "train.iters=50", "train.micro_batch_size=1,2,4"])
    assert sweep.keys == ("zero", "train.micro_batch_size") and sweep.fixed == ("train.iters=50",)
    assert [cell.name for cell in sweep.cells] == [
        "zero-z0_train.micro_batch_size-1",
        "zero-z0_train.micro_batch_size-2",
        "zero-z0_train.micro_batch_size-4",
        "zero-z3_offload_train.micro_batch_size-1",
        "zero-z3_offload_train.micro_batch_size-2",
        "zero-z3_offload_train.micro_batch_size-4",
    ]
    assert sweep.cells[4].overrides == ("zero=z3_offload", "train.iters=50", "train.micro_batch_size=2")
    assert sweep.cells[4].values == {"zero": "z3_offload", "train.micro_batch_size": 2}
    assert sweep.default_name() == "tiny_dp-zero-train.micro_batch_size"
    recipe = load_recipe("cpu/tiny_dp", sweep.cells[4].overrides)
    assert (recipe.zero.stage, recipe.zero.offload_optimizer, recipe.train.micro_batch_size) == (3, True, 2)


def test_a_later_fixed_override_wins_over_a_swept_block():
    sweep = expand("cpu/tiny_dp", ["zero=z0,z3_offload", "zero.pin_memory=false"])
    recipes = [load_recipe("cpu/tiny_dp", cell.overrides) for cell in sweep.cells]
    assert [(r.zero.offload_optimizer, r.zero.pin_memory) for r in recipes] == [(False, False), (True, False)]


def test_a_value_that_holds_commas_is_ambiguous_unless_quoted(capsys):
    assert main(["sweep", "cpu/tiny_dp", "zero=z0,z1", "data.split=98,2,0", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "`data.split=98,2,0` is ambiguous" in err
    assert "one value as \"data.split='98,2,0'\"" in err and "several as \"data.split='98','2','0'\"" in err
    one = expand("cpu/tiny_dp", ["zero=z0,z1", "data.split='98,2,0'"])
    assert one.fixed == ("data.split='98,2,0'",)
    assert load_recipe("cpu/tiny_dp", one.cells[1].overrides).data.split == "98,2,0"
    several = expand("cpu/tiny_dp", ["data.split='98,2,0','90,10,0'"])
    assert [cell.values for cell in several.cells] == [{"data.split": "98,2,0"}, {"data.split": "90,10,0"}]
    assert [cell.name for cell in several.cells] == ["data.split-98,2,0", "data.split-90,10,0"]
    assert [load_recipe("cpu/tiny_dp", c.overrides).data.split for c in several.cells] == [
        "98,2,0",
        "90,10,0",
    ]


def test_a_comma_value_that_is_no_single_value_is_swept():
    # "1,2" is no integer and "z0,z1" no building block: no ambiguity
    sweep = expand("gpt2_z2", ["train.micro_batch_size=1,2", "zero=z0,z1"])
    assert len(sweep.cells) == 4


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["train.micro_batch_size=1,two"], ["the value `two` is not valid for `train.micro_batch_size`"]),
        (["trian.iters=1,2"], ["trian.iters", "did you mean `train`"]),
        (["zero=z0,z9"], ["no building block `zero/z9`"]),
        (["zero=z0,,z1"], ["an empty value between commas"]),
        (["train.micro_batch_size=2,4,2"], ["the value `2` is given twice"]),
        (["zero=z0,z1", "zero=z2,z3"], ["`zero` is swept twice"]),
        (["train.iters=1,2", "train.iters=3"], ["`train.iters=3`: `train.iters` is swept; give it once"]),
        (["train.iters=5"], ["nothing to sweep"]),
        (["zero=z0,z1", "train.lr=fast"], ["`train.lr`", "valid number"]),
    ],
)
def test_bad_sweeps_exit_2_naming_the_word_and_writing_nothing(words, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "cpu/tiny_dp", *words]) == 2
    err = capsys.readouterr().err
    for text in message:
        assert text in err
    assert list(tmp_path.iterdir()) == []


def test_cell_names_are_safe_readable_and_unique():
    sweep = expand("cpu/tiny_dp", ["data.path='/data/a b/owt','/data/a:b/owt','/data/c/owt'"])
    names = [cell.name for cell in sweep.cells]
    assert len(set(names)) == 3 and all("/" not in name and " " not in name for name in names)
    assert names[2] == "data.path-data_c_owt"
    # values that differ only in unsafe characters: the names end in a hash of the overrides
    assert all(name.startswith("data.path-data_a_b_owt-") and len(name) == 31 for name in names[:2])
    long = expand("cpu/tiny_dp", ["data.path=" + ",".join(f"'/{'x' * 150}/{i}'" for i in range(2))])
    assert all(len(cell.name) <= MAX_NAME for cell in long.cells)
    assert len({cell.name for cell in long.cells}) == 2
    assert check_name("gpt2_z1-mb.v2") == "gpt2_z1-mb.v2"
    for bad in ("../x", "a/b", ".hidden", "a b", ""):
        with pytest.raises(UserError, match="--name"):
            check_name(bad)


def test_dry_run_lists_each_cell_with_its_check_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    words = ["cpu/tiny_dp", "zero=z0,z3", "train.micro_batch_size=2,3", f"data.path={DATA}", "train.iters=40"]
    assert main(["sweep", *words, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("zerolab sweep tiny_dp-zero-train.micro_batch_size: 4 cells of ")
    assert out[0].endswith(
        "(zero x train.micro_batch_size) into logs/sweeps/tiny_dp-zero-train.micro_batch_size/"
    )
    assert out[1] == f"every cell: data.path={DATA} train.iters=40"
    cells = [line for line in out if line[:4].strip().isdigit()]
    assert [line.split()[1:3] for line in cells] == [
        ["zero-z0_train.micro_batch_size-2", "ok"],
        ["zero-z0_train.micro_batch_size-3", "refused:"],
        ["zero-z3_train.micro_batch_size-2", "ok"],
        ["zero-z3_train.micro_batch_size-3", "refused:"],
    ]
    refusal = out[out.index(cells[1]) + 1 : out.index(cells[2])]
    assert "global batch 8 is not a multiple of micro batch 3 x data parallel 2 = 6" in refusal[0]
    assert any("fix: set train.global_batch_size" in line for line in refusal)
    assert out[-1] == "would run 2 cell(s); 2 refused; 0 skipped (--dry-run: nothing written)"
    assert list(tmp_path.iterdir()) == []


def test_missing_inputs_refuse_a_cell(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "cpu/tiny_dp", f"data.path='{DATA}','data/none'", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "refused: cannot launch, inputs missing or not the recipe's:" in out and "data/none.bin" in out


def recorded(
    tmp_path: Path, words: list[str], name: str, states: dict[int, str], recipe: str = "cpu/tiny_dp"
) -> Path:
    """A sweep directory as an earlier run leaves it: sweep.json and, for cell i, a run directory
    whose status.json says states[i]."""
    sweep = expand(recipe, words)
    plan = plan_of(sweep, name, display_path(resolve_recipe_path(recipe)))
    directory = tmp_path / "logs" / "sweeps" / name
    directory.mkdir(parents=True)
    write_plan(directory, plan)
    for index, state in states.items():
        run_dir = rundir.claim(directory / plan.cells[index].run_dir)
        rundir.write_status(run_dir, rundir.Status(state=state, exit_code=0 if state == "completed" else 1))
    return directory


def test_the_same_command_resumes_from_the_cells_states(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    words = ["zero=z0,z1,z2,z3", f"data.path={DATA}"]
    recorded(tmp_path, words, "s", {0: "completed", 1: "failed", 2: "killed"})
    assert main(["sweep", "cpu/tiny_dp", *words, "--name", "s", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "zero-z0  skip: completed earlier" in out
    assert "zero-z1  skip: failed earlier; --retry-failed runs it again" in out
    assert "zero-z2  ok (again: killed earlier)" in out and "zero-z3  ok\n" in out
    assert main(["sweep", "cpu/tiny_dp", *words, "--name", "s", "--dry-run", "--retry-failed"]) == 0
    out = capsys.readouterr().out
    assert "zero-z1  ok (again: failed earlier)" in out and "zero-z0  skip: completed earlier" in out


def test_sweeps_of_the_same_cells_summarized_together_each_draw_their_own(tmp_path, monkeypatch):
    # the same swept values under two names (another fixed override gives the same cell names):
    # each sweep's rows and figure hold its own cells, not the other's of the same name
    monkeypatch.chdir(tmp_path)
    logs = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "cpu-engine"
    words = ["train.micro_batch_size=1,2", f"data.path={DATA}"]
    for name, log in (("first", "final_z0.log"), ("second", "final_z1.log")):
        directory = recorded(tmp_path, words, name, {0: "completed", 1: "completed"})
        for cell in ("train.micro_batch_size-1", "train.micro_batch_size-2"):
            shutil.copy(logs / log, directory / cell / rundir.LOG_FILE)
    sweeps = tmp_path / "logs" / "sweeps"
    collection = summarize_paths([sweeps], Options())
    rows = {s.plan.name: [Path(r.row["path"]).parent.name for r in s.runs] for s in collection.sweeps}
    assert rows == {"first": ["first", "first"], "second": ["second", "second"]}
    for sweep in collection.sweeps:
        xs = {"1": 1.0, "2": 2.0}
        drawn = points("tokens_per_s_per_gpu", "train.micro_batch_size", xs, sweep.runs)
        assert [point.x for point in drawn] == [1.0, 2.0]
    assert main(["summarize", str(sweeps), "--out", str(tmp_path / "out")]) == 0
    written = {path.name for path in (tmp_path / "out").glob("sweep-*.png")}
    assert written == {"sweep-first-train.micro_batch_size.png", "sweep-second-train.micro_batch_size.png"}
    figure = sweep_figure(collection.sweeps[0].plan, "train.micro_batch_size", collection.sweeps[0].runs)
    throughput, gpu_memory, host_memory, loss = figure.axes[:4]
    assert [panel.get_ylim()[0] for panel in (throughput, gpu_memory, host_memory)] == [0, 0, 0]  # ratios
    assert loss.get_ylim()[0] > 0 and "y axis not from 0" in loss.get_title()


def test_a_directory_holding_another_sweep_is_refused_with_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    directory = recorded(tmp_path, ["zero=z0,z1", f"data.path={DATA}"], "s", {0: "completed"})
    before = (directory / PLAN_FILE).read_text()
    assert main(["sweep", "cpu/tiny_dp", "zero=z0,z2", f"data.path={DATA}", "--name", "s", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "logs/sweeps/s holds another sweep" in err and "zero=z0,z1" in err and "--name" in err
    assert (directory / PLAN_FILE).read_text() == before
    (directory / PLAN_FILE).write_text("{not json")
    assert main(["sweep", "cpu/tiny_dp", "zero=z0,z1", f"data.path={DATA}", "--name", "s", "--dry-run"]) == 2
    assert "not a sweep plan zerolab can read" in capsys.readouterr().err


SLURM_WORDS = [
    "gpt2_z1",
    "zero=z1,z3",
    "train.micro_batch_size=4,5",
    "hardware.nodes=2",
    "train.global_batch_size=64",
]


def test_slurm_writes_one_array_job_of_the_cells_that_pass_the_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZEROLAB_ENGINE_PYTHON", str(stand_ins_bin(tmp_path) / "python"))
    assert main(["sweep", *SLURM_WORDS, "--slurm", "--name", "grid", "--partition", "gpu"]) == 0
    directory = tmp_path / "logs" / "sweeps" / "grid"
    out = capsys.readouterr().out
    assert "wrote logs/sweeps/grid/sweep.sbatch: 2 array task(s)" in out and "sbatch logs/sweeps/grid" in out
    script = (directory / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-1\n" in script and "#SBATCH --nodes=2\n" in script
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --output=logs/slurm-%x-%A_%a.out\n" in script
    assert subprocess.run(["bash", "-n", str(directory / "sweep.sbatch")]).returncode == 0
    assert shellcheck(directory / "sweep.sbatch").returncode == 0
    plan, _ = read_plan(directory)
    refused = {cell.name: rundir.read_status(directory / cell.run_dir)[0] for cell in plan.cells[1::2]}
    assert [status.state for status in refused.values()] == ["refused", "refused"]
    assert (
        "global batch 64 is not a multiple of micro batch 5"
        in refused["zero-z1_train.micro_batch_size-5"].cause
    )

    # task 1 of the array runs the second runnable cell, zero=z3 at micro batch 4, as render --slurm would
    cell = plan.cells[2]
    result = run_sbatch(script, tmp_path, job_id="77", array_task=1)
    assert result.returncode == 0, result.stderr
    argv = launched(directory / cell.run_dir)
    assert option(argv, "--zero-stage") == "3" and option(argv, "--micro-batch-size") == "4"
    assert option(argv, "--deepspeed_config") == f"logs/sweeps/grid/{cell.run_dir}/ds_config.json"
    recipe = load_recipe("gpt2_z1", [*cell.overrides, "hardware.backend=slurm"])
    assert json.loads((directory / cell.run_dir / "ds_config.json").read_text()) == render(recipe).ds_config
    assert rundir.read_status(directory / cell.run_dir)[0].state == "completed"
    # run again (a requeue): the earlier run directory is kept in .previous/
    assert run_sbatch(script, tmp_path, job_id="78", array_task=1).returncode == 0
    assert [p.name for p in (directory / ".previous").iterdir()] == [f"{cell.run_dir}.before-slurm-78_1"]
    assert run_sbatch(script, tmp_path, job_id="79", array_task=2).returncode == 2

    # the summary of the sweep: its keys as columns, the refused cells as rows, in cell order
    assert main(["summarize", str(directory), "--no-plots"]) == 0
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["sweeps"] == [
        {
            "name": "grid",
            "recipe": str(REPO_ROOT / "recipes" / "gpt2_z1.yaml"),  # run from elsewhere: absolute
            "swept": [
                {"key": "zero", "values": ["z1", "z3"]},
                {"key": "train.micro_batch_size", "values": [4, 5]},
            ],
        }
    ]
    rows = summary["runs"]
    assert [(row["name"], row["status"], row["sweep"]) for row in rows] == [
        ("zero-z1_train.micro_batch_size-5", "refused", {"zero": "z1", "train.micro_batch_size": 5}),
        # the stand-in launcher exits 0 having trained nothing: its log holds no iteration line
        ("zero-z3_train.micro_batch_size-4", "truncated", {"zero": "z3", "train.micro_batch_size": 4}),
        ("zero-z3_train.micro_batch_size-5", "refused", {"zero": "z3", "train.micro_batch_size": 5}),
    ]
    header = (directory / "summary.md").read_text().splitlines()[0]
    assert header.startswith("| run | zero | train.micro_batch_size | setup |")
    csv_header = (directory / "summary.csv").read_text().splitlines()[0].split(",")
    assert csv_header[4:6] == ["sweep.zero", "sweep.train.micro_batch_size"]


def test_slurm_refuses_cells_that_need_different_allocations(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        main(["sweep", "gpt2_z1", "hardware.procs_per_node=2,4", "train.global_batch_size=64", "--slurm"])
        == 2
    )
    assert "different allocations (1 node(s) x 2, 1 node(s) x 4)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_slurm_dry_run_prints_the_job_and_slurm_options_need_slurm(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", *SLURM_WORDS, "--slurm", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("#!/bin/bash\n# gpt2_z1-zero-train.micro_batch_size: 2 runs")
    assert main(["sweep", *SLURM_WORDS, "--image", "x"]) == 2
    assert "--image is an option of --slurm" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_directory_in_use_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    directory = recorded(tmp_path, SLURM_WORDS[1:], "busy", {}, recipe="gpt2_z1")
    with locked(directory):
        assert main(["sweep", "gpt2_z1", *SLURM_WORDS[1:], "--slurm", "--name", "busy"]) == 2
    error = capsys.readouterr().err
    assert (
        f"another zerolab sweep is running in logs/sweeps/busy (pid {os.getpid()}: zerolab sweep busy)"
        in error
    )
    assert not (directory / ".lock").exists()  # held no more, and not left behind


def test_a_lock_removed_by_its_holder_is_taken_afresh(tmp_path):
    directory = tmp_path / "sweep"
    with locked(directory):
        assert (directory / ".lock").is_file()
    assert sorted(path.name for path in directory.iterdir()) == []
    with locked(directory):  # the next sweep takes a new one
        assert (directory / ".lock").is_file()


def test_the_dry_run_refuses_the_cells_the_sweep_would_refuse_with_its_exit_status(
    tmp_path, monkeypatch, capsys
):
    # what a launch checks without launching (a GPU here, a free port) the dry run checks too
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("zerolab.backends.local.query_gpus", lambda: [])  # this machine: no GPU
    fixed = [f"data.path={DATA}", "--name", "s"]
    assert main(["sweep", "cpu/tiny_dp", "hardware=cpu-2ranks,gpu-1node-2", *fixed, "--dry-run"]) == 0
    out = capsys.readouterr().out
    cells = {
        line.split()[1]: line.split(maxsplit=2)[2] for line in out.splitlines() if line[:4].strip().isdigit()
    }
    assert cells["hardware-cpu-2ranks"] == "ok"
    assert (
        cells["hardware-gpu-1node-2"].startswith("refused: cannot launch") and "nvidia-smi sees no GPU" in out
    )
    assert "would run 1 cell(s); 1 refused" in out

    gpu_only = ["cpu/tiny_dp", "hardware=gpu-1node-2,gpu-1node-4", *fixed]
    assert main(["sweep", *gpu_only, "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out.count("refused: cannot launch") == 2 and "would run 0 cell(s); 2 refused" in captured.out
    )
    assert "every cell would be refused" in captured.err and "Traceback" not in captured.err
    assert main(["sweep", *gpu_only]) == 2  # the sweep itself: the same status
    assert "every cell was refused" in capsys.readouterr().err

    with socket.socket() as other_run:
        other_run.bind(("", 0))
        other_run.listen()
        port = other_run.getsockname()[1]
        words = ["cpu/tiny_dp", "zero=z0,z1", f"hardware.master_port={port}", *fixed]
        assert main(["sweep", *words, "--dry-run"]) == 2
    out = capsys.readouterr().out
    assert out.count(f"hardware.master_port {port} is in use on this machine") == 2
    assert list(tmp_path.iterdir()) == []


def seeds(count: int) -> str:
    """A swept word of `count` values."""
    return "train.seed=" + ",".join(str(seed) for seed in range(1, count + 1))


class Terminal(io.StringIO):
    """A stdin that is a terminal, holding what the user types."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def checks(monkeypatch, capsys) -> list[str]:
    """The cells checked (each as a launch would be), with what the terminal showed before the first."""
    seen: list[str] = []

    def check(words, *, name, **_):
        if not seen:
            captured = capsys.readouterr()
            print(captured.out, end="")
            print(captured.err, end="", file=sys.stderr)
            seen.append(captured.out + captured.err)
        seen.append(name)
        return SimpleNamespace(name=name, backend=LocalBackend())

    monkeypatch.setattr("zerolab.sweep.run.plan_launch", check)
    return seen


def test_a_large_sweep_is_counted_at_once_and_checked_only_when_confirmed(
    tmp_path, monkeypatch, capsys, checks
):
    monkeypatch.chdir(tmp_path)
    words = ["sweep", "cpu/tiny_dp", seeds(101), "zero=z0,z1", f"data.path={DATA}"]
    assert main([*words, "--dry-run", "--count"]) == 0  # counts, checks nothing
    out = capsys.readouterr().out
    assert "202 cells (train.seed x zero): 101 x 2" in out and "nothing checked" in out
    assert checks == []

    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a terminal: nobody to ask
    for mode in (["--dry-run"], []):
        assert main([*words, *mode]) == 2
        err = capsys.readouterr().err
        assert "202 cells" in err and "--yes" in err and "--dry-run --count" in err
        assert "Traceback" not in err and checks == [] and list(tmp_path.iterdir()) == []

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    assert main([*words, "--dry-run"]) == 2
    assert "202 cells" in capsys.readouterr().err and checks == []

    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert main([*words, "--dry-run"]) == 0
    assert "202 cells" in checks[0]  # said before the first check
    assert len(checks) == 1 + 202 and "would run 202 cell(s)" in capsys.readouterr().out


def test_a_sweep_says_its_count_before_checking_and_shows_the_checks_progress(
    tmp_path, monkeypatch, capsys, checks
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("zerolab.sweep.progress.CHECK_REPORT_S", 0.0)  # a line per check, off a terminal
    assert main(["sweep", "cpu/tiny_dp", seeds(101), f"data.path={DATA}", "--dry-run", "--yes"]) == 0
    assert "101 cells" in checks[0] and len(checks) == 1 + 101
    err = capsys.readouterr().err
    assert "checked 1 of 101 cells" in err and "checked 101 of 101 cells" in err
