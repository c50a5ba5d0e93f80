"""NVML's view of the GPUs (nvidia-ml-py): each one's total and used memory and utilization,
read by the launch's sampler and by the estimate's check before launch."""

from __future__ import annotations

from typing import Any

MIB = 1024 * 1024


class Gpus:
    """NVML's view of the GPUs: empty where nvidia-ml-py or a GPU driver is missing."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            # pynvml here, not at the top: optional (nvidia-ml-py), present only where NVIDIA's driver is
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception:  # no nvidia-ml-py, no driver, no GPU: sample host memory only
            self.handles = []

    def columns(self) -> list[str]:
        """`gpu{i}_used_MiB,gpu{i}_util_pct` for each GPU."""
        return [name for i in range(len(self.handles)) for name in (f"gpu{i}_used_MiB", f"gpu{i}_util_pct")]

    def total_MiB(self) -> list[float]:
        """Each GPU's total memory (MiB), by NVML index (all GPUs, whatever CUDA_VISIBLE_DEVICES says)."""
        return [self._nvml.nvmlDeviceGetMemoryInfo(handle).total / MIB for handle in self.handles]

    def sample(self) -> list[float]:
        """Used memory (MiB) and utilization (%) of each GPU, in `columns()` order."""
        values: list[float] = []
        for handle in self.handles:
            memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            utilization = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            values += [round(memory.used / MIB, 1), float(utilization.gpu)]
        return values
