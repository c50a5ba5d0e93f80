"""The memory estimate of a recipe: every part on each pipeline stage's GPU, summed per phase
of a training step (end of the forward pass, backward pass, optimizer step); the peak is the
largest phase of the most loaded stage. Host memory: what offload and pinned buffers put there,
plus each rank's process."""

from __future__ import annotations

from dataclasses import dataclass

from zerolab.estimate.activations import StageActivations, stage_activations
from zerolab.estimate.buffers import (
    CPU_PROCESS_GIB,
    FSDP2_CPU_PROCESS_GIB,
    HOST_PROCESS_GIB,
    allreduce_parts,
    bucket_parts,
    gathered_weight_parts,
)
from zerolab.estimate.fsdp2_states import fsdp2_state_parts
from zerolab.estimate.model_states import model_state_parts, step_temporary_parts, weight_bytes
from zerolab.estimate.parts import ALWAYS, BACKWARD, FORWARD, GIB, PHASES, Part, during
from zerolab.estimate.shape import Shape, Stage
from zerolab.recipe.job import job_of
from zerolab.recipe.schema import Recipe


@dataclass(frozen=True)
class StageMemory:
    """One pipeline stage: its parts, activations, and GPU bytes per phase."""

    stage: Stage
    parts: tuple[Part, ...]
    activations: StageActivations

    def gpu_bytes(self, phase: str) -> float:
        """GPU bytes allocated in `phase`."""
        return sum(part.bytes for part in self.parts if not part.host and phase in part.phases)

    @property
    def peak_phase(self) -> str:
        """The phase with the most GPU memory (the earliest of equals)."""
        return max(PHASES, key=self.gpu_bytes)

    @property
    def peak_bytes(self) -> float:
        """GPU bytes at the peak phase."""
        return self.gpu_bytes(self.peak_phase)

    def gpu_parts(self) -> list[Part]:
        """Every part on the GPU in any phase."""
        return [part for part in self.parts if not part.host and part.bytes > 0]

    def gpu_parts_at_peak(self) -> list[Part]:
        """The GPU parts allocated at the peak phase, largest first."""
        phase = self.peak_phase
        parts = [part for part in self.parts if not part.host and phase in part.phases and part.bytes > 0]
        return sorted(parts, key=lambda part: -part.bytes)

    def host_bytes(self, phase: str) -> float:
        """Host bytes one rank holds in `phase`."""
        return sum(part.bytes for part in self.parts if part.host and phase in part.phases)

    def host_parts(self) -> list[Part]:
        """The parts one rank keeps in host memory."""
        return [part for part in self.parts if part.host and part.bytes > 0]


@dataclass(frozen=True)
class MemoryEstimate:
    """The estimate for one recipe."""

    recipe: Recipe
    shape: Shape
    stages: tuple[StageMemory, ...]

    @property
    def peak_stage(self) -> StageMemory:
        """The most loaded pipeline stage (the first of equals)."""
        return max(self.stages, key=lambda stage: stage.peak_bytes)

    @property
    def gpu_peak_gib(self) -> float:
        """Predicted max allocated on the most loaded GPU, GiB."""
        return self.peak_stage.peak_bytes / GIB

    @property
    def on_cpu(self) -> bool:
        """Whether the ranks run on the CPU (their "GPU" memory is then host memory)."""
        return self.recipe.hardware.device == "cpu"

    def process_gib(self) -> float:
        """Host memory of one rank's process before the model is built."""
        if not self.on_cpu:
            return HOST_PROCESS_GIB
        return FSDP2_CPU_PROCESS_GIB if self.recipe.engine == "fsdp2" else CPU_PROCESS_GIB

    @property
    def host_peak_phase(self) -> str:
        """The phase with the most host memory: what the peak stage offloads and, on CPU, its model."""
        stage = self.peak_stage
        return max(PHASES, key=lambda phase: stage.host_bytes(phase) + self.on_cpu * stage.gpu_bytes(phase))

    def host_parts_at_peak(self) -> list[Part]:
        """The host parts one rank holds at the host's peak phase."""
        phase = self.host_peak_phase
        return [part for part in self.peak_stage.host_parts() if phase in part.phases]

    def cpu_model_gib(self) -> float:
        """On CPU, the model states and activations one rank holds at the host's peak phase (else 0)."""
        return self.peak_stage.gpu_bytes(self.host_peak_phase) / GIB if self.on_cpu else 0.0

    def host_rank_gib(self) -> float:
        """Host memory of one rank at the host's peak phase: its process, what it offloads and, on
        CPU, its model."""
        offloaded = self.peak_stage.host_bytes(self.host_peak_phase) / GIB
        return offloaded + self.cpu_model_gib() + self.process_gib()

    def host_peak_gib(self) -> float:
        """Host memory of one node: every rank on it."""
        return self.host_rank_gib() * self.recipe.hardware.procs_per_node


def activation_parts(activations: StageActivations, p: int, shape: Shape) -> list[Part]:
    """The activation terms as parts: kept activations (forward and backward), the loss transient
    (end of forward), the recompute working set (backward), Megatron's score buffer (always)."""
    layer = activations.per_layer
    per_mb = activations.kept_per_micro_batch
    how = f"{activations.in_flight} micro batch(es) x {per_mb / GIB:.3g} GiB"
    if activations.in_flight == 1:
        kept, full = activations.kept_per_layer / GIB, layer.total / GIB
        how = f"{kept:.3g} GiB per layer (of {full:.3g} without recompute)"
    logits = "V/t" if shape.outputs == shape.vocab else "labels"
    parts = [
        Part("activations", "activations", activations.kept, how, during(FORWARD, BACKWARD)),
        Part(
            "loss",
            "logits and loss (fp32)",
            activations.loss,
            f"s x b x {logits} x ({f'{p} + ' if p != 4 else ''}4 + 4) B",
            during(FORWARD),
        ),
        Part(
            "recompute",
            "recomputed activations",
            activations.working_set,
            "rebuilt in the backward pass",
            during(BACKWARD),
        ),
        Part(
            "framework",
            "attention score buffer (Megatron)",
            activations.buffer,
            "[b x a/t, s, s] scores, kept between layers",
            ALWAYS,
        ),
    ]
    if activations.host_checkpoints:
        parts.append(
            Part(
                "checkpoints",
                "activation checkpoints (host)",
                activations.host_checkpoints,
                "cpu_checkpointing",
                host=True,
            )
        )
    return parts


def finetune_load_parts(recipe: Recipe, shape: Shape) -> list[Part]:
    """A fine-tuning rank's host memory while it loads the model: all of it, in fp32, before
    DeepSpeed partitions it (zerolab.rank.finetune_loop loads the whole model on every rank)."""
    if not job_of(recipe).loads_model_whole:
        return []
    how = f"{shape.total_params():,} weights x 4 B, the whole model on every rank while it loads"
    return [Part("load", "model loaded whole (host, fp32)", shape.total_params() * 4, how, host=True)]


def stage_parts(
    recipe: Recipe, shape: Shape, stage: Stage, activations: StageActivations, p: int
) -> list[Part]:
    """Every part of one rank of `stage`: the engine's model states and buffers, and activations (the
    FSDP2 loop's transformers attention keeps no score buffer between layers)."""
    if recipe.engine == "fsdp2":
        kept = [part for part in activation_parts(activations, p, shape) if part.key != "framework"]
        return fsdp2_state_parts(recipe, shape, stage) + kept
    return (
        model_state_parts(recipe, shape, stage)
        + bucket_parts(recipe, shape)
        + gathered_weight_parts(recipe, shape, stage)
        + allreduce_parts(recipe, shape, stage)
        + step_temporary_parts(recipe, shape, stage)
        + activation_parts(activations, p, shape)
        + finetune_load_parts(recipe, shape)
    )


def estimate_memory(recipe: Recipe) -> MemoryEstimate:
    """The memory estimate of a loaded recipe (zerolab.recipe.load_recipe)."""
    shape = Shape.of(recipe)
    p = weight_bytes(recipe)
    stages = []
    for stage in shape.stages():
        activations = stage_activations(shape, stage, p, recipe.activation_checkpointing)
        parts = stage_parts(recipe, shape, stage, activations, p)
        stages.append(StageMemory(stage, tuple(parts), activations))
    return MemoryEstimate(recipe, shape, tuple(stages))
