"""Knowledge distillation (the distillation section, Megatron-DeepSpeed's --kd) trains on the real
engine: a one-layer student under ZeRO-1, on 2 CPU ranks over gloo, distils from the shared ZeRO-0
tiny run's checkpoint (2 layers). The engine sets the student up in DeepSpeed twice under --kd,
which zerolab's distillation_student_wrapped_once workaround makes once. Checks and renders:
tests/unit/test_recipe_bad.py and test_recipe_render.py."""

from __future__ import annotations

import math
import re

from engine_runs import train

from zerolab import rundir


def test_a_student_distils_from_a_trained_teacher_under_zero_1(engine, dataset, trained, tmp_path):
    teacher = trained("z0")
    checkpoints = teacher.run_dir / rundir.CHECKPOINTS_DIR
    distillation = [
        "distillation.kd=true",
        f"distillation.teacher={checkpoints}",
        "distillation.teacher_num_layers=2",
        "distillation.teacher_hidden_size=64",
        "distillation.teacher_num_attention_heads=4",
        "distillation.beta_ce=0.5",
        "distillation.temperature=2.0",
    ]
    student = ("model.num_layers=1", "train.save_interval=null")
    run = train(dataset, tmp_path / "run", "cpu/tiny_z1", *student, *distillation)

    args = run.args
    assert (args["kd"], args["num_layers_teacher"], args["hidden_size_teacher"]) == (True, 2, 64)
    assert (args["num_attention_heads_teacher"], args["kd_beta_ce"], args["kd_temp"]) == (4, 0.5, 2.0)
    assert args["load_teacher"] == str(checkpoints) and args["num_layers"] == 1
    assert "zerolab: workaround distillation_student_wrapped_once:" in run.text
    assert "***>>>>> Setting up the teacher model" in run.text
    # the teacher: the shared run's final weights, strictly loaded into a model of its 2 layers
    assert f"{checkpoints}/global_step3/mp_rank_00_model_states.pt" in run.text
    assert f"successfully loaded checkpoint from {checkpoints}" in run.text
    # each iteration logs the distillation term the student learns beside its language-model loss
    # (lm loss is averaged over the data-parallel ranks, total and kd loss are not)
    terms = re.findall(r"total loss: (\S+) \| lm loss: (\S+) \| kd loss: (\S+) \|", run.text)
    assert len(terms) == 3
    for total, _, kd in ((float(value) for value in term) for term in terms):
        assert math.isfinite(total) and math.isfinite(kd) and kd > 0
    assert run.losses == [float(term[1]) for term in terms]  # lm loss, as parsed for every run
