"""zerolab's workarounds for the pinned engine: each named and explained, each doing what it
says: on stand-in packages shaped like the engine's (always), and on the real engine (its
fused kernels built as `make setup` builds them, up to the compile itself: there is no nvcc
here). The dataset helpers' workarounds: tests/test_engine_data_helpers.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cuda_helpers import cuda_toolkit
from launch_helpers import free_port

from zerolab.engine import fused_kernels
from zerolab.engine.workarounds import WORKAROUNDS, buildable_gencode
from zerolab.locations import REPO_ROOT

STANDIN_FILES = {
    "megatron/__init__.py": "",
    "megatron/model/__init__.py": "",
    "megatron/model/vision/__init__.py": "",
    # The real knn_monitor imports torchvision, which does not load beside the CPU torch wheel.
    "megatron/model/vision/knn_monitor.py": "import torchvision_that_does_not_load\n",
    "megatron/model/transformer.py": textwrap.dedent(
        """
        class CoreAttention:
            def forward(self, query, key, value, mask):
                for tensor in (query, key, value):
                    assert tensor.is_contiguous(), "view() on a non-contiguous tensor"
                return "attended", mask
        """
    ),
    "deepspeed/__init__.py": "",
    "deepspeed/compression/__init__.py": "",  # no compress.py: as in DeepSpeed >= 0.19.7
}


def run_with_standins(
    tmp_path: Path, code: str, files: dict[str, str] = STANDIN_FILES, **env_vars: str
) -> str:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    prelude = "from zerolab.engine.workarounds import apply_all\napplied = apply_all()\n"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}", **env_vars}
    for name in ("ZEROLAB_ATTENTION", "ZEROLAB_PROFILE_DIR", "ZEROLAB_PROFILE_STEPS"):
        if name not in env_vars:
            env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_on_engine(engine: tuple[Path, Path], code: str, **env: str) -> str:
    """stdout of `code` run by the engine's Python with every workaround applied (DS_ACCELERATOR=cpu)."""
    engine_dir, python = engine
    prelude = (
        "import sys\nfrom zerolab.engine.workarounds import apply_all\napply_all()\n"
        f"sys.path.insert(0, {str(engine_dir)!r})\n"
    )
    full_env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO_ROOT), **env}
    result = subprocess.run(
        [str(python), "-c", prelude + textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


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
        "fused_kernels_buildable_archs",
        "helpers_suffix_from_python",
        "python_sample_index",
        "shm_buffers_unlinked",
        "sdpa_attention",
        "profile_training_steps",
    ]
    for workaround in WORKAROUNDS:
        assert workaround.why and "\n" not in workaround.why and len(workaround.why) < 110


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
        "False _StubFinder",
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
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    # Partitioned, the Linear weight looks 1-D: Megatron's own grouping decays nothing.
    assert out.split("\n")[-3:-1] == ["(0,) [(8, 8)]", "[]"]


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


def test_opt_in_patches_apply_only_when_their_variable_asks(tmp_path):
    code = 'print([w.name for w in applied if w.name in ("sdpa_attention", "profile_training_steps")])'
    assert run_with_standins(tmp_path / "plain", code).strip() == "[]"
    sdpa = run_with_standins(tmp_path / "sdpa", code, ZEROLAB_ATTENTION="sdpa")
    assert sdpa.strip() == "['sdpa_attention']"
    profiled = run_with_standins(tmp_path / "profile", code, ZEROLAB_PROFILE_DIR=str(tmp_path / "p"))
    assert profiled.strip() == "['profile_training_steps']"


def run_entry(tmp_path: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess:
    """`python -m zerolab.engine.megatron_entry SCRIPT ARGS` for a script that prints `trained`."""
    script = tmp_path / "pretrain.py"
    script.write_text("print('trained')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLAB_")}
    env |= {"PYTHONPATH": str(REPO_ROOT), "RANK": "0", **env_vars}
    return subprocess.run(
        [sys.executable, "-m", "zerolab.engine.megatron_entry", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )


def test_entry_prints_the_attention_patch_only_when_active(tmp_path):
    plain, sdpa = run_entry(tmp_path), run_entry(tmp_path, ZEROLAB_ATTENTION="sdpa")
    assert plain.returncode == sdpa.returncode == 0
    assert "zerolab: workaround sdpa_attention" not in plain.stdout
    assert "zerolab: workaround sdpa_attention: CoreAttention computed by PyTorch's" in sdpa.stdout
    assert plain.stdout.endswith("trained\n") and sdpa.stdout.endswith("trained\n")


def test_entry_refuses_a_malformed_variable_before_training(tmp_path):
    unknown = run_entry(tmp_path, ZEROLAB_ATTENTION="flash")
    assert unknown.returncode == 1 and "trained" not in unknown.stdout
    assert "ZEROLAB_ATTENTION='flash': zerolab knows only 'sdpa'" in unknown.stderr
    steps = run_entry(tmp_path, ZEROLAB_PROFILE_DIR=str(tmp_path), ZEROLAB_PROFILE_STEPS="5,3")
    assert steps.returncode == 1 and "ZEROLAB_PROFILE_STEPS='5,3'" in steps.stderr


def test_entry_names_the_missing_flash_attn_package(tmp_path):
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed in this Python")
    result = run_entry(tmp_path, "--use-flash-attn-v2")
    assert result.returncode == 1 and "trained" not in result.stdout
    assert "needs the flash_attn package" in result.stderr and "model.attention=sdpa" in result.stderr


def test_real_engine_takes_the_opt_in_patches(engine, tmp_path):
    out = run_on_engine(
        engine,
        """
        import megatron.training, megatron.model.transformer as transformer
        forward = transformer.CoreAttention.forward
        print(forward.__name__, forward.__wrapped__.__name__, megatron.training.train_step.__name__)
        """,
        ZEROLAB_ATTENTION="sdpa",
        ZEROLAB_PROFILE_DIR=str(tmp_path),
    )
    assert out.split("\n")[0] == "sdpa_forward contiguous_forward profiled_train_step"


SDPA_AGAINST_THE_ENGINE = """
    import dataclasses, torch
    sys.argv = ["pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "3",
        "--global-batch-size", "3", "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", "zerolab/assets/gpt2/vocab.json", "--merge-file", "zerolab/assets/gpt2/merges.txt",
        "--distributed-backend", "gloo", "--no-gradient-accumulation-fusion"]
    from megatron import get_args
    from megatron.arguments import core_transformer_config_from_args
    from megatron.core import tensor_parallel
    from megatron.initialize import initialize_megatron
    from megatron.model.enums import AttnMaskType
    from megatron.model.transformer import CoreAttention
    initialize_megatron(allow_no_cuda=True)
    config = core_transformer_config_from_args(get_args())
    sdpa, engine = CoreAttention.forward, CoreAttention.forward.__wrapped__
    seq, batch, heads, size = 32, 3, 4, 16
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)  # GPT's: True is hidden

    def attention(**changes):  # layer 3: query-key layer scaling divides by 3, the softmax multiplies
        changes = {"attention_dropout": 0.0, **changes}
        return CoreAttention(3, dataclasses.replace(config, **changes), AttnMaskType.causal)

    def run(forward, layer, mixed):
        # q, k and v cut from one projection, as the engine does: strided views
        mixed = mixed.detach().clone().requires_grad_()
        q, k, v = (mixed[..., i * heads * size:(i + 1) * heads * size].view(seq, batch, heads, size)
                   for i in range(3))
        out = forward(layer, q, k, v, mask)
        out.float().square().sum().backward()
        return [out.detach().float(), mixed.grad.float()]

    def worst(a, b):
        return max(float((x - y).abs().max()) for x, y in zip(a, b))

    torch.manual_seed(0)
    mixed = torch.randn(seq, batch, 3 * heads * size)
    for changes in ({}, {"apply_query_key_layer_scaling": False}):
        layer = attention(**changes)
        print("fp32", worst(run(sdpa, layer, mixed), run(engine, layer, mixed)))
    exact = run(engine, attention(), mixed)
    half = attention(bf16=True, params_dtype=torch.bfloat16, masked_softmax_fusion=False)
    print("bf16", *(worst(run(forward, half, mixed.bfloat16()), exact) for forward in (sdpa, engine)))

    dropping = attention(attention_dropout=0.5)
    q, k, v = (mixed[..., i * heads * size:(i + 1) * heads * size].view(seq, batch, heads, size)
               for i in range(3))
    tracker = tensor_parallel.get_cuda_rng_tracker()
    saved, default = tracker.get_states(), torch.get_rng_state()
    dropped = sdpa(dropping, q, k, v, mask)
    print("default stream untouched", torch.equal(torch.get_rng_state(), default))
    tracker.set_states(saved)
    print("replayed from the tracker", torch.equal(sdpa(dropping, q, k, v, mask), dropped))
    kept = sdpa(dropping.eval(), q, k, v, mask)
    print("eval drops none", torch.equal(kept, sdpa(attention(), q, k, v, mask)))
    print("training drops some", not torch.equal(kept, dropped))
"""


def test_sdpa_is_the_engines_attention(engine):
    """Forward and backward against the engine's CoreAttention on the same strided q/k/v (micro
    batch 3, 4 heads, causal): equal in fp32 with and without query-key layer scaling, as close to
    fp32 as the engine's own in bf16; dropout drawn from the engine's model-parallel RNG tracker."""
    out = run_on_engine(
        engine,
        SDPA_AGAINST_THE_ENGINE,
        ZEROLAB_ATTENTION="sdpa",
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    lines = [line.split() for line in out.splitlines() if line.startswith(("fp32", "bf16"))]
    assert [line[0] for line in lines] == ["fp32", "fp32", "bf16"]
    assert all(float(line[1]) < 1e-5 for line in lines[:2]), lines
    sdpa_error, engine_error = float(lines[2][1]), float(lines[2][2])
    assert 0 < sdpa_error <= 1.25 * engine_error, lines[2]
    assert "default stream untouched True" in out
    assert "replayed from the tracker True" in out
    assert "eval drops none True" in out and "training drops some True" in out


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
from zerolab.engine.fused_kernels import prebuild
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


def test_every_workaround_is_named_in_the_launching_page():
    # train.log prints each workaround's name: docs/launching.md says what each one is for
    readme = " ".join((REPO_ROOT / "docs" / "launching.md").read_text().split())
    assert [w.name for w in WORKAROUNDS if f"`{w.name}`" not in readme] == []
