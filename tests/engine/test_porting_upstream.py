"""`zerolab from-command` on upstream launches: a set of the pinned engine's examples_deepspeed GPT
scripts, read from the engine checkout and run at their defaults with stub launchers
(zerolab.porting.capture), each ported, rendered back and compared by the engine's own parser and
config classes (benchmarks/upstream_scripts.py surveys all 48); and a shared run's train.log
ported back (`--log`: its argument dump). Unit tests of the parts that need no engine:
tests/unit/test_porting_capture.py and test_from_command.py."""

from __future__ import annotations

import json
import shlex

from zerolab.cli import main
from zerolab.engine.paths import engine_dir
from zerolab.porting.capture import capture_script
from zerolab.porting.survey import survey
from zerolab.recipe.compose import load_recipe

ONE_OF_EACH = [
    "rebase/ds_pretrain_gpt_125M.sh",  # token schedule, samples, pipeline 2 x tensor 2
    "rebase/ds_pretrain_gpt_1.3B_rope.sh",  # rotary
    "MoE/ds_pretrain_gpt_125M_MoE64.sh",  # experts: native
    "MoE/ds_pretrain_gpt_125M_dense_cl.sh",  # a curriculum: native
    "compression/ds_pretrain_gpt_125M_dense_kd.sh",  # distillation: native
    "curriculum_learning/ds_pretrain_gpt_1.3B_rope_slw.sh",  # a curriculum DeepSpeed reads whole
    "sequence_parallel/ds_pretrain_gpt_1.3B_seq_parallel_32k.sh",  # Ulysses, flash-triton
    "offload_pp/ds_pretrain_gpt_350M.sh",  # optimizer offload
    "universal_checkpointing/megatron_gpt/run_bf16.sh",  # fp32 gradient accumulation, --loss-scale
    "azure/run-175b.sh",  # ZeRO-3 offload: DeepSpeed's defaults and the NVMe-only aio block left out
    "rebase/ds_pretrain_gpt_1.3B_megatron_checkpointing.sh",  # no DeepSpeed config: refused by the engine
    "pretrain_llama_distributed.sh",  # SentencePiece tokenizer; Llama's layers through extra
    "pretrain_llama2_distributed.sh",  # grouped-query attention, which the engine cannot run: refused
]


def test_upstream_launches_port_and_every_value_the_render_changes_is_named_with_why(engine):
    root = engine_dir()
    verdicts = {v.script: v for v in survey(root, [root / "examples_deepspeed" / s for s in ONE_OF_EACH])}
    assert len(verdicts) == len(ONE_OF_EACH)
    for name, verdict in verdicts.items():
        if name.endswith("megatron_checkpointing.sh"):
            assert verdict.kind == "refused by the engine", verdict
            assert "train_batch_size or train_micro_batch_size_per_gpu" in verdict.reason
            continue
        if name.endswith("pretrain_llama2_distributed.sh"):
            assert verdict.kind == "refused by zerolab", verdict
            assert "--num-key-value-heads 4 with 16 attention heads" in verdict.reason
            continue
        assert verdict.kind in ("native", "extra"), (name, verdict.reason)
        assert verdict.unexplained == [], (name, verdict.unexplained)

    ulysses = verdicts["examples_deepspeed/sequence_parallel/ds_pretrain_gpt_1.3B_seq_parallel_32k.sh"].ported
    assert (ulysses.recipe.parallel.sequence, ulysses.recipe.data_parallel_size) == (4, 2)
    assert ulysses.recipe.model.attention == "flash-triton"
    rebase = verdicts["examples_deepspeed/rebase/ds_pretrain_gpt_125M.sh"].ported
    train = rebase.recipe.train
    assert (train.samples, train.max_tokens, train.lr_warmup_tokens) == (
        292968750,
        300_000_000_000,
        3_000_000_000,
    )
    assert any(trap.startswith("zero.overlap_comm: ") for trap in rebase.traps)
    native = ("rebase/ds_pretrain_gpt_125M.sh", "rebase/ds_pretrain_gpt_1.3B_rope.sh", "azure/run-175b.sh")
    for name in native:
        assert verdicts[f"examples_deepspeed/{name}"].kind == "native", name
    bf16 = verdicts["examples_deepspeed/universal_checkpointing/megatron_gpt/run_bf16.sh"].ported
    assert bf16.native and bf16.recipe.precision.grad_accum_dtype == "fp32"
    assert bf16.recipe.train.exit_interval == 200
    assert any(note.startswith("--loss-scale: read only by Megatron's own") for note in bf16.notes)
    azure = verdicts["examples_deepspeed/azure/run-175b.sh"].ported
    assert any(note.startswith("ds_config aio: DeepSpeed's async I/O") for note in azure.notes)
    assert "ds_config zero_optimization.sub_group_size: DeepSpeed resolves your config the same" in " ".join(
        azure.notes
    )
    llama = verdicts["examples_deepspeed/pretrain_llama_distributed.sh"].ported
    assert (llama.recipe.data.tokenizer_type, llama.recipe.data.tokenizer_model) == (
        "GPTSentencePieceTokenizer",
        "./tmp/tokenizer.model",
    )
    assert {"--swiglu", "--untie-embeddings-and-output-weights"} <= set(llama.recipe.extra.megatron_args)
    rope = verdicts["examples_deepspeed/rebase/ds_pretrain_gpt_1.3B_rope.sh"].ported
    assert rope.recipe.model.rotary_percent == 0.25
    offload = verdicts["examples_deepspeed/offload_pp/ds_pretrain_gpt_350M.sh"].ported
    assert (offload.recipe.zero.offload_ratio, offload.recipe.zero.stage) == (0.3, 3)
    curriculum = verdicts["examples_deepspeed/curriculum_learning/ds_pretrain_gpt_1.3B_rope_slw.sh"].ported
    assert "curriculum_learning" not in curriculum.recipe.extra.ds_config
    assert (curriculum.recipe.curriculum.min_seq_length, curriculum.recipe.curriculum.max_seq_length) == (
        64,
        2048,
    )
    assert curriculum.recipe.model.rotary
    moe = verdicts["examples_deepspeed/MoE/ds_pretrain_gpt_125M_MoE64.sh"]
    assert moe.kind == "native", moe.ported.recipe.extra if moe.ported else moe.reason
    experts = moe.ported.recipe.moe
    assert (experts.num_experts, experts.expert_parallel, experts.loss_coeff, experts.param_group) == (
        [64],
        8,
        0.01,
        True,
    )
    dense_cl = verdicts["examples_deepspeed/MoE/ds_pretrain_gpt_125M_dense_cl.sh"]
    assert dense_cl.kind == "native", dense_cl.ported.recipe.extra if dense_cl.ported else dense_cl.reason
    cl = dense_cl.ported.recipe.curriculum
    assert (cl.enabled, cl.min_seq_length, cl.max_seq_length, cl.steps) == (True, 72, 2048, 27638)
    kd = verdicts["examples_deepspeed/compression/ds_pretrain_gpt_125M_dense_kd.sh"]
    assert kd.kind == "native", kd.ported.recipe.extra if kd.ported else kd.reason
    teacher = kd.ported.recipe.distillation
    # --kd-beta-ce 1: Megatron's default, which the section leaves null
    assert (kd.ported.recipe.model.num_layers, teacher.kd, teacher.beta_ce) == (10, True, None)
    shape = (teacher.teacher_num_layers, teacher.teacher_hidden_size, teacher.teacher_num_attention_heads)
    assert (
        shape == (12, 768, 12) and "/blob/users/conglli/project/gpt3_with_pile/checkpoint/" in teacher.teacher
    )


def test_from_command_writes_the_recipe_and_names_what_differs(engine, tmp_path, capsys):
    root = engine_dir()
    (launch,) = capture_script(root / "examples_deepspeed" / "rebase" / "ds_pretrain_gpt_125M.sh", root=root)
    command = tmp_path / "launch.sh"
    command.write_text(shlex.join([*launch.launcher, *launch.args]) + "\n")
    config = tmp_path / "ds.json"
    config.write_text(json.dumps(launch.ds_config))
    out = tmp_path / "ported.yaml"

    assert main(["from-command", str(command), "--ds-config", str(config), "--out", str(out)]) == 0
    told = capsys.readouterr().err
    assert (
        "Megatron gradient_accumulation_fusion: yours True, the recipe's False (zerolab turns it off" in told
    )
    assert "porting traps" in told and "zero.overlap_comm" in told
    assert main(["render", str(out), "--json"]) == 0  # the recipe written renders as it is
    rendered = json.loads(capsys.readouterr().out)
    assert rendered["ds_config"]["zero_optimization"]["overlap_comm"] is False

    assert main(["from-command", str(tmp_path / "none.sh")]) == 2
    assert "cannot read the command line" in capsys.readouterr().err


def test_from_command_ports_a_runs_log_back_to_the_recipe_it_ran(trained, tmp_path, capsys):
    run = trained("pp2_z1")  # pipeline 2, ZeRO-1, every layer recomputed
    original = load_recipe(run.run_dir / "recipe.yaml")
    out = tmp_path / "ported.yaml"
    log = run.run_dir / "train.log"
    procs = str(original.hardware.procs_per_node)
    assert main(["from-command", "--log", str(log), "--gpus-per-node", procs, "--out", str(out)]) == 0
    told = capsys.readouterr().err
    assert "the recipe (native keys only) renders your launch back, 0 value(s) differing" in told, told
    ported = load_recipe(out)
    for section in ("model", "parallel", "zero", "precision", "activation_checkpointing", "train"):
        mine, theirs = getattr(ported, section).model_dump(), getattr(original, section).model_dump()
        differing = {
            key: (mine[key], theirs[key])
            for key in mine
            if mine[key] != theirs[key] and (section, key) != ("model", "name")  # the label: from the shape
        }
        assert differing == {}, section
