"""Hugging Face weights that cannot be used as they are, given to `zerolab import`, `eval` and
`generate` as a new user would (issue 40): a weights file cut short (a download that did not
finish), weights that do not cover the model config.json describes (more layers named than held,
fewer, another shape); and a hub model in the cache used where the hub cannot be reached. Each fault
is refused at once, with exit status 2 and one error naming the file or tensors and the fix, no
traceback, nothing written. The models are the session's tiny GPT-2 (transformers made and saved it),
copied and then cut or edited as such folders come about. Paths and hubs that cannot be reached:
tests/unit/test_weights_faults_refusals.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_zerolab

from zerolab.cli import main
from zerolab.engine.paths import engine_python_env

COMMANDS = {
    "import": lambda model, tmp: ["import", str(model), "--out", str(tmp / "imported")],
    "eval": lambda model, tmp: ["eval", str(model), "--task", "wikitext", "--data", "sample"],
    "eval-lm-eval": lambda model, tmp: [
        *("eval", str(model), "--task", "hellaswag", "--data", "sample", "--limit", "2"),
        *("--scorer", "lm-eval"),
    ],
    "generate": lambda model, tmp: ["generate", str(model), "Hello", "--max-new-tokens", "2"],
}
"""Each command that reads a Hugging Face folder, as a user gives it one."""


def _copy(hf_model: Path, folder: Path, **config: int) -> Path:
    """The tiny GPT-2 copied into `folder`, config.json's `config` keys changed."""
    shutil.copytree(hf_model, folder)
    path = folder / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | config))
    return folder


def _refused(argv: list[str], tmp_path: Path, capsys) -> str:
    """What the command said when it refused: exit 2, one `zerolab: error:` and no traceback, and
    nothing written beside the model (no imported folder, no partial one)."""
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("zerolab: error:") == 1, err
    assert not any(f"zerolab {name}: " in err for name in ("import", "eval", "generate")), err  # not echoed
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_weights_file_cut_short_is_named_with_the_fix(command, hf_model, tmp_path, capsys):
    model = _copy(hf_model, tmp_path / "downloaded")
    weights = model / "model.safetensors"
    whole = weights.stat().st_size
    os.truncate(weights, whole // 2)  # the download stopped half way
    err = _refused(COMMANDS[command](model, tmp_path), tmp_path, capsys)
    assert f"{weights}: cut short ({whole // 2:,} bytes of the {whole:,} its header describes)" in err
    assert "download or copy the model again" in err


def test_a_torch_weights_file_cut_short_is_named_with_the_fix(engine, hf_model, tmp_path, capsys):
    # an older save: pytorch_model.bin (torch's zip archive) instead of safetensors
    model = _copy(hf_model, tmp_path / "downloaded")
    code = "import sys, torch, safetensors.torch as st; torch.save(st.load_file(sys.argv[1]), sys.argv[2])"
    bin_file = model / "pytorch_model.bin"
    subprocess.run(
        [str(engine[1]), "-c", code, str(model / "model.safetensors"), str(bin_file)],
        env=engine_python_env(),
        check=True,
        capture_output=True,
    )
    (model / "model.safetensors").unlink()
    os.truncate(bin_file, bin_file.stat().st_size - 1000)
    for argv in (COMMANDS["import"](model, tmp_path), COMMANDS["generate"](model, tmp_path)):
        err = _refused(argv, tmp_path, capsys)
        assert (
            f"{bin_file}: cut short or not a torch file" in err and "download or copy the model again" in err
        )


MISSING_LAYERS = (
    {"n_layer": 4},  # the weights hold 2 layers: layers 2 and 3 would stay random
    "describes: 24 tensors missing, which the model would keep at random initial values "
    "(transformer.h.2.attn.c_attn.bias, transformer.h.2.attn.c_attn.weight, "
    "transformer.h.2.attn.c_proj.bias, transformer.h.2.attn.c_proj.weight, and 20 more)",
)


@pytest.mark.parametrize(
    ("command", "config", "said"),
    [
        *((command, *MISSING_LAYERS) for command in COMMANDS),  # every command loads through one loader
        ("import", {"n_layer": 1}, " tensors the model has no place for (transformer.h.1."),  # layer 1 gone
        (
            "import",
            {"n_positions": 256},
            "describes: 1 tensor of another shape than config.json's "
            "(transformer.wpe.weight [128, 64], not [256, 64])",
        ),
    ],
)
def test_weights_that_do_not_cover_the_config_are_refused_naming_the_tensors(
    command, config, said, hf_model, tmp_path, capsys
):
    model = _copy(hf_model, tmp_path / "edited", **config)
    err = _refused(COMMANDS[command](model, tmp_path), tmp_path, capsys)
    assert f"{model}: its weights do not match the model its config.json describes: " in err, err
    assert said in err, err
    assert "download or save the model again" in err


def test_a_hub_model_in_the_cache_is_used_where_the_hub_cannot_be_reached(engine, hf_model, no_hub, tmp_path):
    # the Hugging Face cache's layout: models--OWNER--NAME/{refs/main, snapshots/REVISION/FILES}
    cached = Path(no_hub["HF_HOME"]) / "hub" / "models--someone--tiny-gpt2"
    shutil.copytree(hf_model, cached / "snapshots" / "0123abcd")
    (cached / "refs").mkdir()
    (cached / "refs" / "main").write_text("0123abcd")
    done, took = run_zerolab(
        ["generate", "someone/tiny-gpt2", "Hello", "--max-new-tokens", "3"], no_hub, tmp_path
    )
    assert done.returncode == 0 and done.stdout.startswith("Hello"), done.stderr
    assert took < 60, took
    done, _ = run_zerolab(["import", "someone/tiny-gpt2", "--out", "imported"], no_hub, tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "imported" / "zerolab-import.json").read_text())
    assert manifest["source"] == "someone/tiny-gpt2"
