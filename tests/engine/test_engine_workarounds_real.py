"""zerolab's workarounds on the real engine: it imports with them (transformers only once used); its
fused kernels, built as `make setup` builds them up to the compile itself (there is no nvcc here), get
only the -gencode pairs nvcc builds, past a stale lock; and ZeRO-3 on gloo keeps what was written in
its gathered parameters and weight-decays them like unpartitioned ones. On stand-in packages:
tests/unit/test_engine_workarounds.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from cuda_helpers import cuda_toolkit
from engine_patch_helpers import one_rank_env, run_on_engine

from zerolab.engine import fused_kernels
from zerolab.engine.paths import engine_python_env, zerolab_on_path


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
        import deepspeed.runtime.hybrid_engine, megatron.tokenizer.tokenizer as tokenizer
        print("transformers" in sys.modules, repr(tokenizer.AutoTokenizer))
        from_pretrained = tokenizer.AutoTokenizer.from_pretrained
        import transformers
        print(from_pretrained == transformers.AutoTokenizer.from_pretrained)
        """,
    )
    assert out.split("\n")[:6] == [
        "False StubFinder",
        "True",
        "contiguous_forward",
        "True full_shape_param_groups",
        "False <transformers.AutoTokenizer, not imported yet>",
        "True",
    ]


COMPILER_IMPORTS = """
    import megatron.training, deepspeed.runtime.engine as ds_engine, deepspeed.moe.sharded_moe
    import deepspeed.runtime.zero.stage3, torch
    layer = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(layer.parameters())  # torch's own disabled functions, called
    layer(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    optimizer.load_state_dict(optimizer.state_dict())
    print("torch._dynamo" in sys.modules, "torch._inductor.compile_fx" in sys.modules, "sympy" in sys.modules)
    taken = ds_engine.register_compile_pass
    print(type(taken).__name__, repr(taken) if type(taken).__name__ == "Deferred" else "")
    print(getattr(taken, "resolve", lambda: taken)().__module__, "torch._dynamo" in sys.modules)
    registered = lambda: hasattr(torch.ops.autosp, "all_to_all")
    print(registered(), end=" ")
    op = sys.modules["deepspeed.compile.custom_ops"].all_to_all
    print(getattr(op, "resolve", lambda: op)().__module__, registered())
    """


def test_real_engine_imports_torchs_compiler_once_a_run_compiles(engine):
    """MoE's compiled gating helpers compile at their first call in training:
    tests/engine/test_moe_curriculum_engine.py; compiled layers: tests/engine/test_speed_engine.py."""
    assert run_on_engine(engine, COMPILER_IMPORTS).split("\n")[-5:-1] == [
        "False False False",
        "Deferred <deepspeed.compile.backend.register_compile_pass, not imported yet>",
        "deepspeed.compile.backend True",
        "False torch._library.custom_ops True",  # the op registered
    ]
    compiled_layers = run_on_engine(engine, COMPILER_IMPORTS, ZEROLAB_SPEED="compiled_layers")
    assert compiled_layers.split("\n")[-5:-1] == [
        "True True True",
        "function ",
        "deepspeed.compile.backend True",
        "True torch._library.custom_ops True",
    ]


def test_real_engine_imports_wandb_only_once_it_is_used(engine):
    """The matrix's W&B run logs through it: tests/engine/test_engine_matrix.py."""
    out = run_on_engine(
        engine,
        """
        import megatron.training, megatron.global_vars
        print("wandb" in sys.modules, "wandb.sdk" in sys.modules, megatron.training.wandb is not None)
        print(callable(megatron.training.wandb.init), "wandb.sdk" in sys.modules)
        real = sys.modules["wandb"]
        print(real.__file__.endswith("wandb/__init__.py"), real.Image.__name__)
        """,
    )
    assert out.split("\n")[-4:-1] == ["True False True", "True True", "True Image"]


def test_deepspeed_gets_py_cpuinfos_answer_asked_once_per_machine(engine, tmp_path):
    """The first process asks py-cpuinfo and keeps its answer beside the ops; the next reads it."""
    first = run_on_engine(
        engine,
        """
        import cpuinfo, json
        from deepspeed.ops.adam import cpu_adam
        from deepspeed.ops.op_builder import CPUAdamBuilder
        builder = CPUAdamBuilder()
        assert cpu_adam.get_cpu_info is cpuinfo.get_cpu_info  # taken by name before the patch: patched
        real = cpuinfo.get_cpu_info.__wrapped__()
        answer = cpuinfo.get_cpu_info()
        assert all(answer.get(key) == real.get(key) for key in ("arch", "flags", "vendor_id_raw"))
        print(json.dumps([builder.cpu_arch(), builder.simd_width(), answer["vendor_id_raw"]]))
        """,
        TORCH_EXTENSIONS_DIR=str(tmp_path),
    )
    (kept,) = tmp_path.glob("cpuinfo-*.json")
    second = run_on_engine(
        engine,
        """
        import cpuinfo, cpuinfo.cpuinfo as inner, json
        def asked():
            raise AssertionError("py-cpuinfo was asked again")
        inner.get_cpu_info_json = asked
        from deepspeed.ops.op_builder import CPUAdamBuilder
        builder = CPUAdamBuilder()
        print(json.dumps([builder.cpu_arch(), builder.simd_width(), cpuinfo.get_cpu_info()["vendor_id_raw"]]))
        """,
        TORCH_EXTENSIONS_DIR=str(tmp_path),
    )
    assert first.splitlines()[-1] == second.splitlines()[-1]
    assert json.loads(kept.read_text())["arch"]


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
        env=engine_python_env() | zerolab_on_path(),
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
        env=engine_python_env() | zerolab_on_path(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert not lock.exists()
    assert f"workaround fused_kernels_stale_lock: removed {lock}" in result.stdout
    assert len(json.loads(result.stdout.splitlines()[-1])) == len(fused_kernels.KERNELS)
