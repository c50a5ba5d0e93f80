"""zerolab's torch stand-ins for NVIDIA apex (zerolab.rank.apex_standin) in the engine's Python: the
layer norm and FusedAdam compute what apex computes (against references written here from apex's
definitions), what they do not compute refuses with the fix, and the real engine's CUDA imports of
apex resolve to the stand-ins. torch is only in the engine's Python: these tests run there, in a
process of their own, and skip when the engine is not set up. Without it: tests/unit/test_apex_standin.py."""

from __future__ import annotations

from apex_standin_helpers import REFUSALS, assert_refused, run_python
from engine_patch_helpers import run_on_engine


def test_layer_norm_equals_a_float64_reference_in_fp32_and_bf16(engine):
    out = run_python(
        str(engine[1]),
        """
        import torch
        from apex.normalization.fused_layer_norm import FusedLayerNormAffineFunction

        def reference(x, weight, bias, eps):  # biased variance, eps inside the square root
            mean = x.mean(-1, keepdim=True)
            variance = ((x - mean) ** 2).mean(-1, keepdim=True)
            return (x - mean) / torch.sqrt(variance + eps) * weight + bias

        generator = torch.Generator().manual_seed(0)
        scale = torch.logspace(-2.5, 0.5, 20).reshape(4, 5, 1)  # eps matters in the small rows
        x = torch.randn(4, 5, 64, generator=generator) * scale + scale  # mean and spread alike
        weight, bias = torch.rand(64, generator=generator) + 0.5, torch.randn(64, generator=generator)
        upstream = torch.randn(4, 5, 64, generator=generator)
        for dtype in (torch.float32, torch.bfloat16):
            leaves = [t.to(dtype).detach().requires_grad_() for t in (x, weight, bias)]
            y = FusedLayerNormAffineFunction.apply(*leaves, torch.Size([64]), 1e-5, True)
            y.backward(upstream.to(dtype))
            exact = [t.detach().double().requires_grad_() for t in leaves]
            expected = reference(*exact, 1e-5)
            expected.backward(upstream.to(dtype).double())
            pairs = zip(("output", "input", "weight", "bias"), [y, *(t.grad for t in leaves)],
                        [expected, *(t.grad for t in exact)])
            for name, got, want in pairs:
                if dtype == torch.float32:
                    close = torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5)
                elif name == "output":  # computed in fp32, rounded once: within bf16's half step
                    close = torch.allclose(got.double(), want, rtol=2**-8, atol=1e-6)
                else:
                    close = torch.allclose(got.double(), want, rtol=1.6e-2, atol=1.6e-2 * want.abs().max())
                print(str(dtype)[6:], name, str(got.dtype)[6:], close)
        """,
    )
    assert out.split("\n")[:-1] == [
        f"{dtype} {name} {dtype} True"
        for dtype in ("float32", "bfloat16")
        for name in ("output", "input", "weight", "bias")
    ]


ADAM_STEPS = """
import torch
from apex.optimizers import FusedAdam

generator = torch.Generator().manual_seed(0)
shapes = [(16, 8), (8,)]
initial = [torch.randn(shape, generator=generator) for shape in shapes]
gradients = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(5)]
groups = [dict(lr=1e-2, weight_decay=0.1), dict(lr=3e-3, weight_decay=0.0)]
beta1, beta2, eps = 0.9, 0.95, 1e-8

def reference(index, decoupled):
    # apex csrc/multi_tensor_adam.cu: ADAM_MODE_1 (decoupled, adam_w_mode=True), ADAM_MODE_0 (L2)
    p = initial[index].double()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    lr, wd = groups[index]["lr"], groups[index]["weight_decay"]
    for t in range(1, 6):
        g = gradients[t - 1][index].double()
        if not decoupled:
            g = g + wd * p
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        update = (m / (1 - beta1**t)) / (torch.sqrt(v / (1 - beta2**t)) + eps)
        if decoupled:
            update = update + wd * p
        p = p - lr * update
    return p

def trained(**options):
    params = [torch.nn.Parameter(p.clone()) for p in initial]
    param_groups = [{"params": [p], **group} for p, group in zip(params, groups)]
    optimizer = FusedAdam(param_groups, betas=(beta1, beta2), eps=eps, **options)
    for step in range(5):
        for p, g in zip(params, gradients[step]):
            p.grad = g.clone()
        optimizer.step()
        optimizer.zero_grad()
    return optimizer, params

def distance(params, decoupled):
    gaps = [(p.detach().double() - reference(i, decoupled)).abs().max() for i, p in enumerate(params)]
    return max(gaps).item()
"""


def test_fused_adam_equals_apex_adamw_and_its_l2_form(engine):
    out = run_python(
        str(engine[1]),
        ADAM_STEPS,
        """
        for adam_w_mode in (True, False):
            optimizer, params = trained(adam_w_mode=adam_w_mode)
            print(adam_w_mode, distance(params, adam_w_mode) < 1e-6, distance(params, not adam_w_mode) > 1e-3)
        fused = optimizer.param_groups[0]["fused"]
        print(isinstance(optimizer, torch.optim.Optimizer), fused, params[0].grad)
        optimizer, params = trained(set_grad_none=False)
        print(params[0].grad.abs().sum().item())
        """,
    )
    assert out.split("\n")[:-1] == [
        "True True True",
        "False True True",
        "True None None",  # an Optimizer; on CPU torch's default implementation; grads set to None
        "0.0",  # set_grad_none=False: zeroed instead
    ]


def test_what_the_standins_do_not_compute_refuses_with_the_fix(engine):
    out = run_python(
        str(engine[1]),
        REFUSALS,
        """
        import torch
        from apex.optimizers import FusedAdam, FusedSGD
        from apex.normalization import MixedFusedRMSNorm
        from apex.multi_tensor_apply import multi_tensor_applier
        import amp_C
        params = [torch.nn.Parameter(torch.zeros(2))]
        refused("apex.optimizers.FusedSGD", lambda: FusedSGD(params, lr=0.1))
        refused("apex.normalization.MixedFusedRMSNorm", lambda: MixedFusedRMSNorm(8))
        refused("apex.multi_tensor_apply.multi_tensor_applier",
                lambda: multi_tensor_applier(amp_C.multi_tensor_scale, None, [[], []], 1.0))
        refused("apex.optimizers.FusedAdam(amsgrad=True)", lambda: FusedAdam(params, amsgrad=True))
        refused("apex.optimizers.FusedAdam(bias_correction=False)",
                lambda: FusedAdam(params, bias_correction=False))
        for absent in ("apex.contrib.layer_norm.layer_norm", "fused_weight_gradient_mlp_cuda"):
            try:  # the engine imports these inside try/except and takes its own path
                __import__(absent)
            except ModuleNotFoundError as error:
                print(f"absent: {error.name}")
        """,
    )
    absent = [line for line in out.splitlines() if line.startswith("absent: ")]
    assert absent == ["absent: apex.contrib", "absent: fused_weight_gradient_mlp_cuda"]
    assert_refused(
        "\n".join(line for line in out.splitlines() if not line.startswith("absent: ")),
        "apex.optimizers.FusedSGD",
        "apex.normalization.MixedFusedRMSNorm",
        "apex.multi_tensor_apply.multi_tensor_applier",
        "apex.optimizers.FusedAdam(amsgrad=True)",
        "apex.optimizers.FusedAdam(bias_correction=False)",
    )


def test_real_engine_cuda_imports_of_apex_resolve_to_the_standins(engine):
    out = run_on_engine(
        engine,
        """
        import importlib.util, inspect, types
        print(importlib.util.find_spec("apex"))  # the engine's Python has no apex
        from zerolab.rank.apex_standin import APEX_TORCH_STANDINS
        assert APEX_TORCH_STANDINS in LAUNCH_PATCHES  # applied by every CUDA rank; this one says cpu
        APEX_TORCH_STANDINS.apply()
        import torch
        from deepspeed.accelerator import get_accelerator
        # Megatron imports apex where DeepSpeed's accelerator is CUDA: the CPU's, named so for these
        get_accelerator().device_name = lambda device_index=None: "cuda"
        import megatron.model, megatron.optimizer, megatron.utils
        import megatron.model.fused_layer_norm as fused_layer_norm
        import megatron.optimizer.distrib_optimizer as distrib_optimizer
        from deepspeed.runtime.zero.utils import ZERO_SUPPORTED_OPTIMIZERS
        adam = megatron.optimizer.Adam
        zero_supported = adam in ZERO_SUPPORTED_OPTIMIZERS  # apex's FusedAdam is, where apex is
        print(adam.__module__, adam.__name__, distrib_optimizer.Adam is adam, zero_supported)
        model = megatron.model
        print(model.LayerNorm is fused_layer_norm.MixedFusedLayerNorm, model.RMSNorm.__name__)
        print(megatron.utils.amp_C.__spec__.origin)

        function = fused_layer_norm.FusedLayerNormAffineFunction
        print("memory_efficient" in inspect.getfullargspec(function.forward).args)
        megatron.global_vars._GLOBAL_ARGS = types.SimpleNamespace(params_dtype=torch.float32)
        layer_norm = fused_layer_norm.MixedFusedLayerNorm(8)
        class CudaLooking(torch.Tensor):  # takes MixedFusedLayerNorm.forward's CUDA branch
            is_cuda = property(lambda self: True)
        arguments = []
        function.apply = lambda *args, apply=function.apply: arguments.append(len(args)) or apply(*args)
        x = torch.randn(2, 3, 8).as_subclass(CudaLooking).requires_grad_()
        layer_norm(x).sum().backward()
        expected = torch.nn.functional.layer_norm(x.as_subclass(torch.Tensor), (8,), eps=1e-5)
        print(arguments, torch.allclose(layer_norm(x).as_subclass(torch.Tensor), expected, atol=1e-6))
        print(layer_norm.weight.grad is not None and layer_norm.bias.grad is not None, x.grad.shape)
        """,
    )
    assert out.split("\n")[-8:-1] == [
        "None",
        "zerolab.rank.apex_standin FusedAdam True True",
        "True MixedFusedRMSNorm",
        "zerolab workaround for amp_C",
        "True",
        "[6, 6] True",  # the forward pass with 6 arguments, twice (backward, then compared)
        "True torch.Size([2, 3, 8])",
    ]
