"""Whether the engine's CUDA builds are needed, and what for (zerolab.engine.cuda): the GPUs
from nvidia-smi's answer, the architectures to build for, what an nvcc can build, and the plan
that `make setup` follows, from the facts a CUDA machine reports. On this machine for real:
tests/engine/test_engine_cuda_on_this_machine.py."""

from __future__ import annotations

import os
from pathlib import Path

from cuda_helpers import cuda_toolkit

from zerolab.engine import cuda
from zerolab.rank import nvcc

# `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` on a node with two H100s and an A100.
NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA H100 80GB HBM3, 9.0\nNVIDIA A100-SXM4-80GB, 8.0\n"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
    "latest NVIDIA driver is installed and running.\n"
)


def test_gpus_and_the_architectures_to_build_for_from_nvidia_smi():
    gpus = cuda.parse_gpus(NVIDIA_SMI)
    assert [gpu.capability for gpu in gpus] == ["9.0", "9.0", "8.0"]
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert cuda.arch_list(gpu.capability for gpu in gpus) == "8.0;9.0"
    assert cuda.arch_list(["12.0", "9.0", "10.0"]) == "9.0;10.0;12.0"  # by number, not by text
    assert cuda.parse_gpus(NO_DRIVER) == []


def test_nvidia_smi_is_asked_when_there_is_one(tmp_path, monkeypatch):
    assert cuda.query_gpus() == []  # this machine has no nvidia-smi
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\n[ "$*" = "{" ".join(cuda.GPU_QUERY[1:])}" ] || exit 2\ncat <<\'EOF\'\n{NVIDIA_SMI}EOF\n'
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert [gpu.capability for gpu in cuda.query_gpus()] == ["9.0", "9.0", "8.0"]


def test_what_nvcc_can_build(tmp_path):
    new, old = (cuda_toolkit(tmp_path, release) / "bin" / "nvcc" for release in ("13.0", "12.9"))
    assert nvcc.nvcc_version(new) == "13.0" and nvcc.nvcc_version(old) == "12.9"
    assert {"compute_90", "sm_90", "sm_75"} <= nvcc.nvcc_targets(new)
    assert "sm_70" not in nvcc.nvcc_targets(new) and "compute_70" not in nvcc.nvcc_targets(new)
    assert {"compute_70", "sm_70"} <= nvcc.nvcc_targets(old)
    assert nvcc.nvcc_targets(tmp_path / "no-nvcc") is None


def cuda_probe(tmp_path: Path, *, devices: int = 1, cuda_home: bool = True) -> dict:
    """What probe.py reports on a CUDA machine with torch 2.13.0 built for CUDA 13.0."""
    return {
        "torch": "2.13.0+cu130",
        "cuda_version": "13.0",
        "cuda_home": str(cuda_toolkit(tmp_path, "13.0")) if cuda_home else None,
        "devices": [{"name": "NVIDIA H100 80GB HBM3", "memory_GiB": 79.1, "capability": "9.0"}] * devices,
    }


def test_with_a_gpu_the_plan_builds_for_its_architecture_with_torchs_nvcc(tmp_path):
    plan = cuda.plan(cuda_probe(tmp_path), cuda.parse_gpus(NVIDIA_SMI)[:1])
    assert (plan.needed, plan.arch_list, plan.nvcc_release, plan.problem) == (True, "9.0", "13.0", None)
    assert plan.reason.startswith("torch 2.13.0+cu130 (CUDA 13.0); builds for TORCH_CUDA_ARCH_LIST=9.0 from ")
    assert plan.nvcc == str(tmp_path / "cuda-13.0" / "bin" / "nvcc")
    # Without nvidia-smi (a container without the driver's utilities), the GPUs torch sees.
    assert cuda.plan(cuda_probe(tmp_path / "b"), []).arch_list == "9.0"


def test_torch_arch_list_builds_for_gpus_elsewhere_and_without_it_no_gpu_means_no_cuda_build(tmp_path):
    assert cuda.plan(cuda_probe(tmp_path, devices=0), [], "8.0;9.0").arch_list == "8.0;9.0"
    plan = cuda.plan(cuda_probe(tmp_path / "b", devices=0), [])
    assert plan.needed is False and "no GPU is visible" in plan.reason


def test_what_stands_in_the_way_is_named_with_its_fix(tmp_path):
    no_nvcc = cuda.plan(cuda_probe(tmp_path, cuda_home=False), cuda.parse_gpus(NVIDIA_SMI))
    assert no_nvcc.needed and "nvcc" in no_nvcc.problem["what"]
    assert "CUDA 13.0 toolkit" in no_nvcc.problem["fix"]
    cpu_torch = cuda.plan(
        {"torch": "2.13.0+cpu", "cuda_version": None, "devices": []}, cuda.parse_gpus(NVIDIA_SMI)
    )
    assert cpu_torch.needed is False
    assert "CPU build" in cpu_torch.problem["what"] and "NVIDIA H100" in cpu_torch.problem["what"]
