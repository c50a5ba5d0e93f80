"""zerolab's workarounds for the pinned engine: each named and explained, each doing what it
says on stand-in packages shaped like the engine's. On the real engine:
tests/engine/test_engine_workarounds_real.py; the dataset helpers' workarounds:
tests/engine/test_engine_data_helpers.py."""

from __future__ import annotations

import os
import subprocess
import textwrap

from engine_patch_helpers import STANDIN_FILES, run_with_standins

from zerolab.contracts import SWITCH_NAMES
from zerolab.locations import REPO_ROOT
from zerolab.rank.megatron_entry import LAUNCH_PATCHES
from zerolab.rank.workarounds import WORKAROUNDS, buildable_gencode, stale_build_lock


def test_every_workaround_is_named_and_explained_in_one_line():
    names = [w.name for w in WORKAROUNDS]
    assert names == [
        "lazy_vision_import",
        "lazy_wandb_import",
        "lazy_transformers_import",
        "lazy_compiler_import",
        "collector_paused_in_start_up",
        "missing_compression_module",
        "contiguous_attention_inputs",
        "ulysses_batch_dimension",
        "ulysses_loss_gather_on_gloo",
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
        "cpu_info_once",
        "zero3_gathers_complete",
        "zero3_weights_only_load",
        "zero3_universal_group_settings",
        "model_built_under_mics_init",
        "mics_gathers_on_gloo",
        "mics_resumes",
        "mics_partition_rank_in_its_shard",
        "distillation_student_wrapped_once",
        "final_checkpoint_saved_once",
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


TRANSFORMERS_STANDIN = {
    **STANDIN_FILES,
    # transformers shaped as its readers see it: a package whose import is slow, said when it happens
    "transformers/__init__.py": textwrap.dedent(
        """
        print("transformers imported")
        from transformers import models
        class AutoTokenizer:
            @classmethod
            def from_pretrained(cls, name):
                return f"tokenizer {name}"
        class AutoModelForCausalLM:
            @classmethod
            def from_pretrained(cls, name):
                return f"model {name}"
        """
    ),
    "transformers/models/__init__.py": "from transformers.models import opt\n",
    "transformers/models/opt/__init__.py": "from transformers.models.opt import modeling_opt\n",
    "transformers/models/opt/modeling_opt.py": "class OPTLearnedPositionalEmbedding:\n    pass\n",
    # the three readers, each taking from transformers at its import as the engine's files do
    "megatron/tokenizer/__init__.py": "",
    "megatron/tokenizer/tokenizer.py": "from transformers import AutoTokenizer\n",
    "deepspeed/linear/__init__.py": "",
    "deepspeed/linear/context_manager.py": textwrap.dedent(
        """
        try:
            import transformers
        except ImportError:
            transformers = None
        class Init:
            def __enter__(self):
                self.original = transformers.AutoModelForCausalLM.from_pretrained
                transformers.AutoModelForCausalLM.from_pretrained = lambda name: f"patched {name}"
            def __exit__(self, *exc):
                transformers.AutoModelForCausalLM.from_pretrained = self.original
        """
    ),
    "deepspeed/runtime/__init__.py": "",
    "deepspeed/runtime/hybrid_engine.py": textwrap.dedent(
        """
        try:
            import transformers
            OPTLearnedPositionalEmbedding = transformers.models.opt.modeling_opt.OPTLearnedPositionalEmbedding
        except (ImportError, AttributeError):
            OPTLearnedPositionalEmbedding = None
        class DeepSpeedHybridEngine:
            def __init__(self):
                self.policies = {OPTLearnedPositionalEmbedding: "OPTEmbedding"}
        """
    ),
}


def test_transformers_is_imported_once_used_not_by_the_engines_imports(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        import sys
        import megatron.tokenizer.tokenizer as tokenizer
        import deepspeed.linear.context_manager as context_manager
        import deepspeed.runtime.hybrid_engine as hybrid_engine
        print("after the imports:", "transformers" in sys.modules)
        print(tokenizer.AutoTokenizer.from_pretrained("gpt2"))
        engine = hybrid_engine.DeepSpeedHybridEngine()
        from transformers.models.opt.modeling_opt import OPTLearnedPositionalEmbedding
        print(engine.policies == {OPTLearnedPositionalEmbedding: "OPTEmbedding"})
        with context_manager.Init():
            import transformers
            print(transformers.AutoModelForCausalLM.from_pretrained("gpt2"))
        print(transformers.AutoModelForCausalLM.from_pretrained("gpt2"))
        """,
        TRANSFORMERS_STANDIN,
    )
    assert out.split("\n")[:6] == [
        "after the imports: False",
        "transformers imported",
        "tokenizer gpt2",
        "True",
        "patched gpt2",
        "model gpt2",
    ]


def test_what_transformers_lacks_is_none_to_the_hybrid_engine_as_before(tmp_path):
    files = {**TRANSFORMERS_STANDIN, "transformers/models/opt/modeling_opt.py": ""}
    out = run_with_standins(
        tmp_path,
        """
        import deepspeed.runtime.hybrid_engine as hybrid_engine
        print(hybrid_engine.DeepSpeedHybridEngine().policies)
        """,
        files,
    )
    assert out.split("\n")[:2] == ["transformers imported", "{None: 'OPTEmbedding'}"]


def test_transformers_imported_first_is_what_the_readers_get(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        import transformers
        import megatron.tokenizer.tokenizer as tokenizer
        print(tokenizer.AutoTokenizer is transformers.AutoTokenizer)
        """,
        TRANSFORMERS_STANDIN,
    )
    assert out.split("\n")[:2] == ["transformers imported", "True"]


COMPILER_STANDIN = {
    **STANDIN_FILES,
    # torch's compiler as DeepSpeed meets it: compile and disable import dynamo, which says so; so do
    # torch's own disabled functions (at their first call) and its optimizers' step (at each)
    "torch/__init__.py": textwrap.dedent(
        """
        import contextlib
        from torch import compiler
        from torch._compile import _disable_dynamo
        from torch import optim

        @contextlib.contextmanager
        def set_grad_enabled(mode):
            yield

        def compile(model=None, **options):
            import torch._dynamo
            return lambda *args: ("compiled", model(*args))
        """
    ),
    "torch/_compile.py": textwrap.dedent(
        """
        import functools

        def _disable_dynamo(fn=None, recursive=True):
            if fn is None:
                return functools.partial(_disable_dynamo, recursive=recursive)

            @functools.wraps(fn)
            def inner(*args, **kwargs):
                disable_fn = getattr(fn, "__dynamo_disable", None)
                if disable_fn is None:
                    import torch._dynamo
                    disable_fn = lambda *args, **kwargs: ("disabled", fn(*args, **kwargs))
                    fn.__dynamo_disable = disable_fn
                return disable_fn(*args, **kwargs)

            return inner
        """
    ),
    "torch/optim/__init__.py": "from torch.optim.optimizer import Optimizer, SGD\n",
    "torch/optim/optimizer.py": textwrap.dedent(
        """
        import functools, torch

        def _use_grad_for_differentiable(func):
            def _use_grad(*args, **kwargs):
                import torch._dynamo
                return ("graph breaks", func(*args, **kwargs))
            functools.update_wrapper(_use_grad, func)
            return _use_grad

        class Optimizer:
            def __init__(self, params):
                self.defaults = {"differentiable": False}
                self.add_param_group(params)

            @torch._disable_dynamo
            def add_param_group(self, params):
                self.params = params

        class SGD(Optimizer):
            @_use_grad_for_differentiable
            def step(self):
                return "stepped"
        """
    ),
    "torch/compiler.py": textwrap.dedent(
        """
        def disable(fn=None, recursive=True, *, reason=None):
            import torch._dynamo
            return lambda *args: ("disabled", fn(*args))
        """
    ),
    "torch/_dynamo/__init__.py": 'print("dynamo imported")\n',
    "torch/_dynamo/compiled_autograd.py": "def _enable(compiler):\n    return ('enabled', compiler)\n",
    "deepspeed/runtime/__init__.py": "",
    "deepspeed/runtime/compiler.py": "from torch._dynamo.compiled_autograd import _enable as enable\n",
    "deepspeed/runtime/engine.py": textwrap.dedent(
        """
        from deepspeed.compile.backend import register_compile_pass
        from deepspeed.compile.passes import zero3_compile
        import deepspeed.compile.custom_ops

        SUPPORTED = False

        def is_deepcompile_supported():
            return SUPPORTED

        class DeepSpeedEngine:
            def __init__(self):
                supported = is_deepcompile_supported()
                self.passes = [register_compile_pass(zero3_compile.NAME)] if supported else []

            def load_checkpoint(self, *args):
                pass
        """
    ),
    "deepspeed/compile/__init__.py": "",
    "deepspeed/compile/backend.py": "import torch._dynamo\n\nregister_compile_pass = str\n",
    "deepspeed/compile/passes/__init__.py": "import torch._dynamo\n",
    "deepspeed/compile/passes/zero3_compile.py": "NAME = 'zero3'\n",
    "deepspeed/compile/custom_ops/__init__.py": "from .all_to_all import all_to_all\n",
    "deepspeed/compile/custom_ops/all_to_all.py": 'print("custom ops registered")\nall_to_all = len\n',
}
COMPILER_USED = """
    import sys, torch
    import deepspeed.runtime.compiler as compiler, deepspeed.runtime.engine as engine
    square = torch.compile(lambda x: x * x)

    @torch.compiler.disable
    def plus_one(x):
        return x + 1

    optimizer = torch.optim.SGD([1])
    print("imports", "torch._dynamo" in sys.modules)
    print(plus_one(1), optimizer.step(), engine.DeepSpeedEngine().passes, "torch._dynamo" in sys.modules)
    print(square(3), plus_one(1), optimizer.step(), optimizer.add_param_group([2]))
    engine.SUPPORTED = True
    print(engine.DeepSpeedEngine().passes, compiler.enable("inductor"))
    """


def test_torchs_compiler_is_imported_once_something_compiles(tmp_path):
    assert run_with_standins(tmp_path, COMPILER_USED, COMPILER_STANDIN).splitlines() == [
        "imports False",
        "2 stepped [] False",
        "dynamo imported",
        "('compiled', 9) ('disabled', 2) ('graph breaks', 'stepped') ('disabled', None)",
        "custom ops registered",
        "['zero3'] ('enabled', 'inductor')",
    ]


def test_a_launch_that_compiles_imports_torchs_compiler_with_deepspeed(tmp_path):
    out = run_with_standins(tmp_path, COMPILER_USED, COMPILER_STANDIN, ZEROLAB_SPEED="compiled_layers")
    assert out.splitlines()[:4] == [
        "dynamo imported",
        "custom ops registered",
        "imports True",
        "('disabled', 2) ('graph breaks', 'stepped') [] True",
    ]


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


TRAINING_STANDIN = {
    **STANDIN_FILES,
    # megatron/training.py as it saves: the loop through save_checkpoint_and_time at each
    # save_interval, then pretrain() once more after training, both through the module's name
    "megatron/training.py": textwrap.dedent(
        """
        from types import SimpleNamespace

        written = []

        def save_checkpoint(iteration, model, optimizer, scheduler):
            written.append(iteration)

        def get_args():
            return SimpleNamespace(rank=0)

        def setup_model_and_optimizer(*args):
            pass

        def setup_teacher_model(*args):
            pass

        def save_checkpoint_and_time(iteration, model, optimizer, scheduler):
            save_checkpoint(iteration, model, optimizer, scheduler)

        def pretrain(train_iters, save_interval):
            for iteration in range(1, train_iters + 1):
                if iteration % save_interval == 0:
                    save_checkpoint_and_time(iteration, None, None, None)
            save_checkpoint(train_iters, None, None, None)
        """
    ),
}


def test_the_last_iterations_checkpoint_is_saved_once(tmp_path):
    out = run_with_standins(
        tmp_path,
        """
        from megatron import training
        training.pretrain(train_iters=6, save_interval=3)
        print("interval divides:", training.written)
        training.written.clear()
        training.pretrain(train_iters=7, save_interval=3)
        print("interval does not divide:", training.written)
        """,
        TRAINING_STANDIN,
    )
    assert out.strip().splitlines() == [
        "zerolab: workaround final_checkpoint_saved_once: the checkpoint of iteration 6 is saved already; "
        "not saving it again",
        "interval divides: [3, 6]",
        "interval does not divide: [3, 6, 7]",
    ]


COLLECTOR_STANDIN = {
    **STANDIN_FILES,
    # megatron/training.py's pretrain: it sets up (a data loader's worker forked), then trains; the
    # functions the other workarounds wrap, as TRAINING_STANDIN has them
    "megatron/training.py": TRAINING_STANDIN["megatron/training.py"]
    + textwrap.dedent(
        """
        import gc, os

        def train():
            return gc.isenabled()

        def pretrain():
            print("setting up:", gc.isenabled())
            read, write = os.pipe()
            if os.fork() == 0:
                os.write(write, str(gc.isenabled()).encode())
                os._exit(0)
            os.wait()
            print("a forked worker:", os.read(read, 16).decode())
            print("training:", train())
        """
    ),
}


def test_the_collector_is_paused_while_a_rank_sets_up_and_on_again_to_train_and_in_forked_workers(tmp_path):
    code = "from megatron import training\ntraining.pretrain()\n"
    out = run_with_standins(tmp_path, code, COLLECTOR_STANDIN)
    assert out.strip().splitlines() == ["setting up: False", "a forked worker: True", "training: True"]


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
