"""`zerolab prep inspect` reports what a dataset holds and rejects a .bin/.idx that disagree; a launch
refuses, before any rank starts, what it finds."""

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from prep_helpers import FIXTURES, prep

from zerolab.cli import main
from zerolab.data_prep.indexed import write_index
from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.job import check_inputs, refuse_missing_inputs

TINY = "cpu/tiny_z1"


def golden_pair(tmp_path, idx_name: str):
    shutil.copy(FIXTURES / "dolly151_text_document.bin", tmp_path / "d_text_document.bin")
    shutil.copy(FIXTURES / idx_name, tmp_path / "d_text_document.idx")
    return tmp_path / "d"


def test_inspect_prints_counts_and_decoded_documents(tmp_path, capsys):
    prefix = golden_pair(tmp_path, "dolly151_text_document.idx")
    assert prep("inspect", str(prefix), "--show", "1") == 0
    out = capsys.readouterr().out
    assert "documents: 151" in out and "tokens:    31,619" in out and "uint16" in out
    assert "Why is Citizen Kane considered the Best Film?" in out
    assert "OK" in out


def test_inspect_rejects_megatron_deepspeeds_index_that_leaves_out_the_eod(tmp_path, capsys):
    prefix = golden_pair(tmp_path, "dolly151_megatron-deepspeed-eod-bug.idx")
    assert prep("inspect", f"{prefix}_text_document") == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "31,468 tokens" in out


def test_inspect_detects_a_bin_changed_after_its_manifest(tmp_path, capsys):
    out = tmp_path / "dolly"
    assert prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(out)) == 0
    assert prep("inspect", str(out)) == 0
    data = bytearray((tmp_path / "dolly_text_document.bin").read_bytes())
    data[10] ^= 1
    (tmp_path / "dolly_text_document.bin").write_bytes(bytes(data))
    assert prep("inspect", str(out)) == 1
    assert "sha256" in capsys.readouterr().out


def test_inspect_of_a_truncated_bin_or_missing_prefix(tmp_path, capsys):
    prefix = golden_pair(tmp_path, "dolly151_text_document.idx")
    with open(f"{prefix}_text_document.bin", "r+b") as handle:
        handle.truncate(1000)
    assert prep("inspect", str(prefix)) == 1
    assert prep("inspect", str(tmp_path / "nothing")) == 2


def damage_idx_cut(prefix):
    with open(f"{prefix}_text_document.idx", "r+b") as handle:
        handle.truncate(3000)  # 62 bytes short: its last document-index entries
    return f"{prefix}_text_document.idx: 3,000 bytes, but its header describes 3,062"


def damage_idx_magic(prefix):
    path = Path(f"{prefix}_text_document.idx")
    path.write_bytes(b"\0" * 9 + path.read_bytes()[9:])
    return f"{prefix}_text_document.idx is not a Megatron MMIDIDX index (bad magic)"


def damage_idx_offsets(prefix):
    path = Path(f"{prefix}_text_document.idx")
    data = bytearray(path.read_bytes())
    data[34 + 151 * 4 + 8 * 10] ^= 0x10  # a byte of document 10's offset
    path.write_bytes(bytes(data))
    return f"{prefix}_text_document.idx: byte offsets are not the running sum of the sizes"


def damage_bin_cut(prefix):
    with open(f"{prefix}_text_document.bin", "r+b") as handle:
        handle.truncate(60000)
    return (
        f"the sizes in {prefix}_text_document.idx add up to 31,619 tokens (63,238 bytes) but "
        f"{prefix}_text_document.bin holds 60,000 bytes"
    )


DAMAGES = [damage_idx_cut, damage_idx_magic, damage_idx_offsets, damage_bin_cut]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda damage: damage.__name__)
def test_a_launch_refuses_the_damage_inspect_finds_naming_the_file_and_the_fix(tmp_path, capsys, damage):
    prefix = golden_pair(tmp_path, "dolly151_text_document.idx")
    said = damage(prefix)
    assert prep("inspect", str(prefix)) == 1
    assert said in capsys.readouterr().out

    # what `zerolab launch` checks before any rank starts: the same finding, with the fix
    recipe = load_recipe(TINY, [f"data.path={prefix}_text_document"])
    with pytest.raises(UserError) as refused:
        refuse_missing_inputs(recipe, "launch")
    message = str(refused.value)
    assert f"data.path: {prefix}_text_document is damaged or cut short: {said}." in message
    assert f"`zerolab prep CORPUS --out {prefix} --force`" in message

    run_dir = tmp_path / "run"
    assert main(["launch", TINY, f"data.path={prefix}_text_document", "--run-dir", str(run_dir)]) == 2
    assert said in capsys.readouterr().err and not run_dir.exists()


def test_a_damaged_split_dataset_of_the_recipe_names_its_own_command_to_make_it_again(tmp_path, capsys):
    # a dataset made by `zerolab prep`: the fix is the recipe's own prepare_command, with --force
    out = tmp_path / "dolly"
    command = f"zerolab prep jsonl {FIXTURES / 'dolly151_text.jsonl'} --out {out} --split 9,1"
    assert prep(*command.split()[2:]) == 0
    damage_bin_cut_valid = Path(f"{out}_valid_text_document.bin")
    damage_bin_cut_valid.write_bytes(damage_bin_cut_valid.read_bytes()[:-2])
    overrides = ["data.path=null", f"data.train_path={out}_train_text_document"]
    overrides += [f"data.valid_path={out}_valid_text_document", f"data.prepare_command={command}"]
    problems = check_inputs(load_recipe(TINY, overrides))
    assert len(problems) == 1
    assert problems[0].startswith(f"data.valid_path: {out}_valid_text_document is damaged or cut short: ")
    assert f"prepare it again with `{command} --force`" in problems[0]


def test_the_launch_check_reads_the_index_and_the_size_of_the_bin_only(tmp_path):
    # a .bin of 20 GB (sparse: nothing on disk) that its index describes, checked without reading it
    count = 1_000_000
    sizes = np.full(count, 10_000, dtype=np.int32)
    prefix = tmp_path / "big_text_document"
    write_index(Path(f"{prefix}.idx"), lambda: [sizes], count, np.uint16)
    with open(f"{prefix}.bin", "wb") as handle:
        handle.truncate(count * 10_000 * 2)
    started = time.process_time()
    assert check_inputs(load_recipe(TINY, [f"data.path={prefix}"])) == []
    assert time.process_time() - started < 5  # reading 20 GB would take minutes
