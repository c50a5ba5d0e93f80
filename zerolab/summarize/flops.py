"""Model FLOPs per iteration (Megatron-DeepSpeed's throughput_calculator formula) and
the dense bf16/fp16 peak of common GPUs, for TFLOPs and MFU."""

from __future__ import annotations

import re
from dataclasses import dataclass

# (pattern on the device name, peak dense bf16/fp16 TFLOP/s); first match wins, so the
# more specific names come first (anchors: vendor datasheets, without sparsity)
GPU_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"H200", 989.4),
    (r"H100.*PCIe", 756.0),
    (r"H100", 989.4),
    (r"A100", 312.0),
    (r"A40\b", 149.7),
    (r"A10\b", 125.0),
)


def peak_tflops(device_name: str) -> float | None:
    """The peak dense TFLOP/s of the GPU named `device_name`, None when not in the table."""
    for pattern, peak in GPU_PEAK_TFLOPS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return peak
    return None


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs; ffn_hidden_size defaults to 4 * hidden_size."""

    num_layers: int
    hidden_size: int
    seq_length: int
    padded_vocab_size: int
    ffn_hidden_size: int | None = None
    recompute: bool = False

    def flops_per_sample(self) -> float:
        """FLOPs of one sample's forward and backward pass (plus a forward with recompute).

        fwd MACs = s * [L * (4 h^2 + 2 h s + 2 f h) + V h]; total = (3 or 4) * fwd; FLOPs = 2 * MACs.
        """
        h, s, f = self.hidden_size, self.seq_length, self.ffn_hidden_size or 4 * self.hidden_size
        forward_macs = s * (
            self.num_layers * (4 * h * h + 2 * h * s + 2 * f * h) + self.padded_vocab_size * h
        )
        return 2.0 * (4 if self.recompute else 3) * forward_macs


def tflops_per_gpu(shape: ModelShape, global_batch_size: float, ms_per_iter: float, world_size: int) -> float:
    """Achieved model TFLOP/s per GPU for one iteration of `global_batch_size` samples."""
    return shape.flops_per_sample() * global_batch_size / (ms_per_iter / 1000.0 * world_size * 1e12)
