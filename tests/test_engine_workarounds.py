"""zerolab's workarounds for the pinned engine: each named and explained, each doing what it
says: on stand-in packages shaped like the engine's (always), and on the real engine (its
fused kernels built as `make setup` builds them, up to the compile itself: there is no nvcc
here). The dataset helpers' workarounds: tests/test_engine_data_helpers.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap

import pytest
from cuda_helpers import cuda_toolkit
from engine_patch_helpers import STANDIN_FILES, one_rank_env, run_on_engine, run_with_standins

from zerolab.contracts import SWITCH_NAMES
from zerolab.engine import fused_kernels
from zerolab.locations import REPO_ROOT
from zerolab.rank.megatron_entry import LAUNCH_PATCHES
from zerolab.rank.workarounds import WORKAROUNDS, buildable_gencode, stale_build_lock


def test_every_workaround_is_named_and_explained_in_one_line():
    names = [w.name for w in WORKAROUNDS]
    assert names == [
        "lazy_vision_import",
        "missing_compression_module",
        "contiguous_attention_inputs",
        "zero3_weight_decay_groups",
        "cpu_adamw_like_gpu",
        "cpu_activation_checkpointing",
        "partitioned_checkpoint_arguments",
        "contiguous_checkpoints_in_eval",
        "recompute_chunks_of_layers",
        "fused_kernels_only_when_called",
        "fused_kernels_buildable_archs",
        "fused_kernels_stale_lock",
        "helpers_not_built_at_launch",
        "python_sample_index",
        "shm_buffers_unlinked",
        "zero3_gathers_complete",
        "zero3_weights_only_load",
        "zero3_universal_group_settings",
    ]
    assert [(p.name, p.kind) for p in LAUNCH_PATCHES[len(WORKAROUNDS) :]] == [
        ("apex_torch_standins", "workaround"),
        ("sdpa_attention", "patch"),
        *((name, "switch") for name in SWITCH_NAMES),
        ("speed_ladder", "patch"),
        ("profile_training_steps", "patch"),
        ("forward_probe", "patch"),
    ]
    for patch in LAUNCH_PATCHES:
        assert patch.why and "\n" not in patch.why and len(patch.why) < 110


def test_vision_module_loads_only_when_called(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        from megatron.model.vision.knn_monitor import compute_feature_bank
        print("imported")
        try:
            compute_feature_bank(None)
        except ModuleNotFoundError as error:
            print("called:", error.name)
        """,
    )
    assert out.split("\n")[:2] == ["imported", "called: torchvision_that_does_not_load"]


def test_missing_compression_module_is_provided_and_says_why_when_used(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        from deepspeed.compression.compress import init_compression, redundancy_clean
        try:
            init_compression(None, {}, None)
        except RuntimeError as error:
            print(error)
        """,
    )
    assert "removed in 0.19.7" in out and "deepspeed<=0.19.6" in out


def test_an_existing_compression_module_is_left_alone(tmp_path):
    files = {
        **STANDIN_FILES,
        "deepspeed/compression/compress.py": "def init_compression(*a):\n    return 'real'\n",
    }
    out = run_with_standins(
        tmp_path,
        "from deepspeed.compression.compress import init_compression\nprint(init_compression())",
        files,
    )
    assert out.strip() == "real"


def test_attention_inputs_are_made_contiguous(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        class Strided:
            def __init__(self, contiguous=False):
                self.contiguous_ = contiguous
            def is_contiguous(self):
                return self.contiguous_
            def contiguous(self):
                return Strided(True)
        from megatron.model.transformer import CoreAttention
        print(CoreAttention().forward(Strided(), Strided(), Strided(), "mask"))
        """,
    )
    assert out.strip() == "('attended', 'mask')"


def test_real_engine_imports_with_the_workarounds(engine):
    out = run_on_engine(
        engine,
        """
        import megatron.training, megatron.model.transformer as transformer
        import deepspeed.compression.compress as compress
        knn_monitor = sys.modules["megatron.model.vision.knn_monitor"]
        print("torchvision" in sys.modules, type(knn_monitor.__spec__.loader).__name__)
        print(compress.__file__.endswith("deepspeed/compression/compress.py"))
        print(transformer.CoreAttention.forward.__name__)
        import megatron.optimizer, torch
        print(megatron.optimizer.Adam is torch.optim.AdamW, megatron.optimizer.get_param_groups.__name__)
        """,
    )
    assert out.split("\n")[:4] == [
        "False StubFinder",
        "True",
        "contiguous_forward",
        "True full_shape_param_groups",
    ]


OPTIMIZER_STANDIN = {
    **STANDIN_FILES,
    "megatron/optimizer/__init__.py": textwrap.dedent(
        """
        def get_param_groups(modules, no_weight_decay_cond, scale_lr_cond, lr_mult):
            decayed = []
            for name, param in modules:
                if no_weight_decay_cond is not None:
                    no_wd = no_weight_decay_cond(name, param)
                else:
                    no_wd = name.endswith(".bias") or len(param.shape) == 1
                if not no_wd:
                    decayed.append(name)
            return decayed
        """
    ),
}


def test_weight_decay_groups_use_the_full_shape_of_partitioned_parameters(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        from types import SimpleNamespace
        from megatron.optimizer import get_param_groups
        partitioned = [  # what zero.Init leaves: .shape (0,), the real shape in .ds_shape
            ("fc.weight", SimpleNamespace(shape=(0,), ds_shape=(4, 4))),
            ("fc.bias", SimpleNamespace(shape=(0,), ds_shape=(4,))),
            ("norm.weight", SimpleNamespace(shape=(0,), ds_shape=(4,))),
        ]
        whole = [("fc.weight", SimpleNamespace(shape=(4, 4))), ("norm.weight", SimpleNamespace(shape=(4,)))]
        print(get_param_groups(partitioned, None, None, 1.0))
        print(get_param_groups(whole, None, None, 1.0))
        print(get_param_groups(whole, lambda name, param: True, None, 1.0))
        """,
        OPTIMIZER_STANDIN,
    )
    assert out.split("\n")[:3] == ["['fc.weight']", "['fc.weight']", "[]"]


def test_real_zero3_init_parameters_are_weight_decayed_like_unpartitioned_ones(engine):
    out = run_on_engine(
        engine,
        """
        import deepspeed, torch
        from megatron.optimizer import get_param_groups
        deepspeed.init_distributed(dist_backend="gloo")
        config = {"train_batch_size": 1, "zero_optimization": {"stage": 3}}
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
        def decayed(groups):
            return [tuple(p.ds_shape) for g in groups if g["wd_mult"] for p in g["params"]]
        print(tuple(model[0].weight.shape), decayed(get_param_groups([model], None, None, 1.0)))
        print(decayed(get_param_groups.__wrapped__([model], None, None, 1.0)))
        """,
        **one_rank_env(),
    )
    # Partitioned, the Linear weight looks 1-D: Megatron's own grouping decays nothing.
    assert out.split("\n")[-3:-1] == ["(0,) [(8, 8)]", "[]"]


def test_real_zero3_gathered_parameters_hold_what_was_written_on_gloo(engine):
    """Two ranks write known values into gathered ZeRO-3 weights (a large one first, as the word
    embeddings come first) and read them back, 60 times. Without zero3_gathers_complete, 1 to 55 of
    the 1,080 reads were wrong in each of 4 runs: the large weight's gather arrived late."""
    out = run_on_engine(
        engine,
        """
        import os, torch, torch.multiprocessing as mp
        def rank_reads(rank, port):
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_PORT=port)
            import deepspeed
            deepspeed.init_distributed(dist_backend="gloo")
            config = {"train_batch_size": 2,
                      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
            with deepspeed.zero.Init(config_dict_or_path=config):
                small = [torch.nn.Linear(8, 8) for _ in range(8)]
                model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), *small)
            params = list(model.parameters())
            wrong = 0
            for k in range(60):
                with deepspeed.zero.GatheredParameters(params, modifier_rank=0), torch.no_grad():
                    for i, param in enumerate(params):
                        if rank == 0:
                            param.fill_(k + i)
                with deepspeed.zero.GatheredParameters(params):
                    wrong += sum(not bool((param == k + i).all()) for i, param in enumerate(params))
            os.write(1, f"rank {rank}: {wrong} wrong of {60 * len(params)}\\n".encode())  # one write
        mp.start_processes(rank_reads, args=(os.environ["MASTER_PORT"],), nprocs=2, start_method="fork")
        """,
        **one_rank_env(),
    )
    # the two ranks write to one pipe, each line in one write, in either order
    assert sorted(re.findall(r"rank (\d): (\d+) wrong of (\d+)", out)) == [
        ("0", "0", "1080"),
        ("1", "0", "1080"),
    ]


def adam_standins(device: str) -> dict[str, str]:
    """Stand-ins for torch's and apex's Adam and for megatron.optimizer's choice between them."""
    return {
        **STANDIN_FILES,
        "torch/__init__.py": "",
        "torch/optim/__init__.py": "from torch.optim.adam import Adam\nfrom torch.optim.adamw import AdamW\n",
        "torch/optim/adam.py": "class Adam:\n    pass\n",
        "torch/optim/adamw.py": "class AdamW:\n    pass\n",
        "apex/__init__.py": "",
        "apex/optimizers.py": "class FusedAdam:\n    pass\n",
        "megatron/optimizer/__init__.py": (
            "from apex.optimizers import FusedAdam as Adam\n"
            if device == "cuda"
            else "from torch.optim import Adam\n"
        )
        + "def get_param_groups(modules, no_weight_decay_cond, scale_lr_cond, lr_mult):\n    return []\n",
    }


def test_on_cpu_megatron_adam_becomes_decoupled_adamw_and_on_gpu_stays_fused_adam(tmp_path):
    code = """
        import megatron.optimizer
        print(megatron.optimizer.Adam.__module__, megatron.optimizer.Adam.__name__)
        """
    assert (
        run_with_standins(tmp_path / "cpu", code, adam_standins("cpu")).strip() == "torch.optim.adamw AdamW"
    )
    assert (
        run_with_standins(tmp_path / "cuda", code, adam_standins("cuda")).strip()
        == "apex.optimizers FusedAdam"
    )


def test_gencode_pairs_outside_what_nvcc_builds_are_left_out():
    flags = [
        "-O3",
        "-gencode",
        "arch=compute_70,code=sm_70",
        "-gencode=arch=compute_90,code=[sm_90,compute_90]",
    ]
    kept, dropped = buildable_gencode(flags, frozenset({"compute_90", "sm_90"}))
    assert kept == ["-O3", "-gencode=arch=compute_90,code=[sm_90,compute_90]"]
    assert dropped == ["-gencode", "arch=compute_70,code=sm_70"]


FUSED_KERNELS_BUILD = """
import json, sys
from pathlib import Path
import torch.utils.cpp_extension as cpp_extension
cpp_extension.CUDA_HOME = sys.argv[2]  # what torch finds on a CUDA build; this torch is CPU-only
loads = []
cpp_extension.load = lambda **kwargs: loads.append(kwargs)  # the compile itself: no nvcc here
from zerolab.rank.prebuild_kernels import prebuild
prebuild(Path(sys.argv[1]))
print(json.dumps([[load["name"], load["extra_cuda_cflags"]] for load in loads]))
"""


@pytest.mark.parametrize(
    ("release", "gencodes"),
    [
        ("13.0", ["80", "90"]),  # nvcc 13 cannot build sm_70: left out, with a word about it
        ("12.9", ["70", "80", "86", "87", "89", "90"]),  # the engine's own flags, untouched
    ],
)
def test_real_fused_kernels_get_only_the_gencode_pairs_nvcc_builds(engine, tmp_path, release, gencodes):
    engine_dir, python = engine
    shutil.copytree(
        engine_dir / "megatron" / "fused_kernels", tmp_path / "engine" / "megatron" / "fused_kernels"
    )
    toolkit = cuda_toolkit(tmp_path, release)
    result = subprocess.run(
        [str(python), "-c", FUSED_KERNELS_BUILD, str(tmp_path / "engine"), str(toolkit)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    loads = json.loads(result.stdout.splitlines()[-1])
    assert [name for name, _ in loads] == list(fused_kernels.KERNELS)
    for _, flags in loads:
        pairs = [flags[i + 1] for i, flag in enumerate(flags) if flag == "-gencode"]
        assert pairs == [f"arch=compute_{arch},code=sm_{arch}" for arch in gencodes]
        assert "--use_fast_math" in flags and "--expt-extended-lambda" in flags
    said = "nvcc 13.0 cannot build -gencode arch=compute_70,code=sm_70: left out of Megatron's fused kernels"
    assert (said in result.stdout) is (release == "13.0")


def test_a_build_lock_is_stale_only_when_old_and_no_build_works_in_its_directory(tmp_path):
    lock = tmp_path / "lock"
    lock.touch()
    assert stale_build_lock(tmp_path) is None  # just taken: a build may be starting
    os.utime(lock, (lock.stat().st_atime - 60, lock.stat().st_mtime - 60))
    with subprocess.Popen(["sleep", "30"], cwd=tmp_path) as ninja:  # a build at work there
        try:
            assert stale_build_lock(tmp_path) is None
        finally:
            ninja.kill()
    assert stale_build_lock(tmp_path) == lock
    assert stale_build_lock(tmp_path / "elsewhere") is None


def test_a_stale_lock_of_the_real_fused_kernels_is_removed_before_the_build(engine, tmp_path):
    # a check stopped by a time limit mid-build left it: the next build waited 9 minutes in
    # silence until it was cut off too (H200, 2026-11-25)
    engine_dir, python = engine
    kernels = tmp_path / "engine" / "megatron" / "fused_kernels"
    shutil.copytree(
        engine_dir / "megatron" / "fused_kernels", kernels, ignore=shutil.ignore_patterns("build")
    )
    lock = fused_kernels.build_dir(tmp_path / "engine") / "lock"
    lock.parent.mkdir()
    lock.touch()
    os.utime(lock, (lock.stat().st_atime - 60, lock.stat().st_mtime - 60))
    result = subprocess.run(
        [
            str(python),
            "-c",
            FUSED_KERNELS_BUILD,
            str(tmp_path / "engine"),
            str(cuda_toolkit(tmp_path, "12.9")),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert not lock.exists()
    assert f"workaround fused_kernels_stale_lock: removed {lock}" in result.stdout
    assert len(json.loads(result.stdout.splitlines()[-1])) == len(fused_kernels.KERNELS)


def test_every_workaround_and_patch_is_named_in_the_launching_page():
    # train.log prints each one's name: docs/launching.md says what each one is for
    page = " ".join((REPO_ROOT / "docs" / "launching.md").read_text().split())
    assert [p.name for p in LAUNCH_PATCHES if f"`{p.name}`" not in page] == []


def test_the_fused_softmax_kernels_are_built_only_where_they_are_called(tmp_path):
    files = {
        **STANDIN_FILES,
        "megatron/fused_kernels/__init__.py": (
            "cpp_extension = None\n\n\ndef load(args):\n    raise RuntimeError('nvcc ran')\n"
        ),
    }
    out = run_with_standins(
        tmp_path,
        """
        from types import SimpleNamespace
        from megatron import fused_kernels
        print(fused_kernels.load(SimpleNamespace(masked_softmax_fusion=False)))
        try:
            fused_kernels.load(SimpleNamespace(masked_softmax_fusion=True))
        except RuntimeError as error:
            print(error)
        """,
        files,
    )
    assert "--no-masked-softmax-fusion: Megatron's fused softmax kernels are never called" in out
    assert out.splitlines()[-2:] == ["None", "nvcc ran"]


def test_a_launch_compiles_no_dataset_helpers(tmp_path):
    files = {
        **STANDIN_FILES,
        "megatron/data/__init__.py": "",
        "megatron/data/dataset_utils.py": "def compile_helper():\n    raise RuntimeError('make ran')\n",
    }
    out = run_with_standins(
        tmp_path, "from megatron.data.dataset_utils import compile_helper\ncompile_helper()\n", files
    )
    assert "Megatron's dataset helpers are built by `make setup`, not at launch" in out
