"""What `zerolab estimate` prints: rich tables for a person, or one JSON object."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from zerolab.estimate.buffers import ALLOCATOR_HEADROOM, CUDA_CONTEXT_GIB
from zerolab.estimate.communication import (
    NVLINK_GBPS,
    PCIE_GBPS,
    Traffic,
    step_traffic,
    with_data_parallel,
)
from zerolab.estimate.fit import DOES_NOT_FIT, FITS, INVALID, MICRO_BATCHES, TIGHT, FitTable
from zerolab.estimate.memory import MemoryEstimate
from zerolab.estimate.parts import GIB, PHASES
from zerolab.recipe.output import description_lines, summary_line
from zerolab.recipe.setups import ZERO_SETUPS

GB = 1e9
DATA_PARALLEL_SIZES = (1, 2, 8)
"""Data-parallel sizes the traffic is also shown for, besides the recipe's own."""

STATUS_STYLE = {FITS: "green", TIGHT: "yellow", DOES_NOT_FIT: "red", INVALID: "dim"}
STATUS_MARK = {FITS: "✓", TIGHT: "~", DOES_NOT_FIT: "✗", INVALID: "—"}


def _gib(value: float) -> float:
    return round(value, 3)


def _count(value: float) -> str:
    """`124 M`, `1.56 B`."""
    return f"{value / 1e9:.3g} B" if value >= 1e9 else f"{value / 1e6:.3g} M"


def _links(link_gbps: float | None) -> list[tuple[str, float]]:
    links = [("NVLink 4", NVLINK_GBPS), ("PCIe Gen5 x16", PCIE_GBPS)]
    return [*links, ("your link", link_gbps)] if link_gbps else links


def traffic_rows(est: MemoryEstimate) -> list[tuple[int, Traffic | None]]:
    """(data-parallel size, traffic of the most loaded stage's rank) for the recipe's size and
    DATA_PARALLEL_SIZES; None where the global batch does not divide."""
    sizes = sorted({est.shape.data, *DATA_PARALLEL_SIZES})
    stage = est.peak_stage.stage
    rows = []
    for size in sizes:
        shape = with_data_parallel(est.recipe, est.shape, size)
        rows.append((size, None if shape is None else step_traffic(est.recipe, shape, stage)))
    return rows


def as_json(
    est: MemoryEstimate, *, fit: FitTable | None, link_gbps: float | None, host_gbps: float
) -> dict[str, Any]:
    """The `--json` object: gpu_gib (peak and its parts), host_gib (peak and its parts), the
    phases, activations, pipeline stages, traffic, and the fit table when asked for."""
    recipe, stage = est.recipe, est.peak_stage
    gpu = {"peak": _gib(est.gpu_peak_gib)} | {part.key: _gib(part.gib) for part in stage.gpu_parts_at_peak()}
    every_part = {
        part.key: {"gib": _gib(part.gib), "phases": [p for p in PHASES if p in part.phases]}
        for part in stage.gpu_parts()
    }
    ranks = recipe.hardware.procs_per_node
    host = {
        "peak": _gib(est.host_peak_gib()),
        "per_rank": _gib(est.host_rank_gib()),
        "ranks": ranks,
        "process": _gib(est.process_gib() * ranks),
    }
    host |= {part.key: _gib(part.gib * ranks) for part in est.host_parts_at_peak()}
    if est.on_cpu:
        host["model_and_activations"] = _gib(est.cpu_model_gib() * ranks)
    activations = stage.activations
    traffic = {}
    for size, moved in traffic_rows(est):
        if moved is None:
            continue
        traffic[str(size)] = {
            "bytes_per_rank_GB": {
                key: round(getattr(moved, key) / GB, 4)
                for key in (
                    "all_reduce",
                    "reduce_scatter",
                    "all_gather",
                    "tensor_parallel",
                    "pipeline",
                    "to_host",
                    "from_host",
                )
            },
            "seconds": {name: round(moved.seconds(gbps, host_gbps), 4) for name, gbps in _links(link_gbps)},
        }
    result: dict[str, Any] = {
        "recipe": recipe.path,
        "overrides": list(recipe.overrides),
        "estimable": True,
        "device": recipe.hardware.device,
        "weights": est.shape.total_params(),
        "weights_on_peak_gpu": stage.stage.params,
        "gpu_gib": gpu,
        "peak_phase": stage.peak_phase,
        "phases_gib": {phase: _gib(stage.gpu_bytes(phase) / GIB) for phase in PHASES},
        "gpu_parts": every_part,
        "pipeline_stages": [
            {"stage": s.stage.index, "peak_gib": _gib(s.peak_bytes / GIB), "phase": s.peak_phase}
            for s in est.stages
        ],
        "activations_gib": {
            "per_layer_without_recompute": _gib(activations.per_layer.total / GIB),
            "kept_per_layer": _gib(activations.kept_per_layer / GIB),
            "layers_on_gpu": stage.stage.layers,
            "micro_batches_in_flight": activations.in_flight,
            "kept": _gib(activations.kept / GIB),
            "loss": _gib(activations.loss / GIB),
            "recompute": _gib(activations.working_set / GIB),
        },
        "cuda_context_gib": CUDA_CONTEXT_GIB,
        "allocator_headroom": ALLOCATOR_HEADROOM,
        "host_gib": host,
        "host_peak_phase": est.host_peak_phase,
        "traffic_per_step": {
            "data_parallel": traffic,
            "link_gbps": dict(_links(link_gbps)),
            "host_link_gbps": host_gbps,
        },
    }
    if fit is not None:
        result["fit"] = {
            "gpu_memory_gib": fit.gpu_memory_gib,
            "global_batch": fit.global_batch,
            "global_batch_by_micro_batch": {str(micro): fit.global_batches[micro] for micro in MICRO_BATCHES},
            "current": {"setup": fit.current[0], "micro_batch": fit.current[1]},
            "setups": {
                setup: {
                    str(micro): {
                        "status": cell.status,
                        "peak_gib": None if cell.peak_gib is None else _gib(cell.peak_gib),
                        "reason": cell.reason,
                    }
                    for micro in MICRO_BATCHES
                    for cell in [fit.cells[setup, micro]]
                }
                for setup, _ in ZERO_SETUPS
            },
        }
    return result


def unestimable_json(recipe: Any, reasons: list[str]) -> dict[str, Any]:
    """The `--json` object of a recipe the estimator does not model."""
    return {
        "recipe": recipe.path,
        "overrides": list(recipe.overrides),
        "estimable": False,
        "reasons": reasons,
        "gpu_gib": None,
        "host_gib": None,
    }


def header(est: MemoryEstimate) -> str:
    """The recipe, its overrides and its one-line summary (a length in epochs without its data:
    iterations unknown; the estimate does not need them)."""
    return "\n".join([*description_lines(est.recipe), summary_line(est.recipe)])


def gpu_table(est: MemoryEstimate) -> Any:
    """Every GPU part in each phase of a step (the peak phase in bold), with how it was counted."""

    stage = est.peak_stage
    where = (
        f", pipeline stage {stage.stage.index + 1} of {est.shape.pipeline}" if est.shape.pipeline > 1 else ""
    )
    device = "per rank (CPU: host memory)" if est.on_cpu else "per GPU"
    table = Table(
        title=f"Memory {device}{where} (GiB): {_count(stage.stage.params)} of "
        f"{_count(est.shape.total_params())} weights here",
        title_justify="left",
    )
    table.add_column("part")
    for phase in PHASES:
        header = f"[bold]{phase} (peak)[/]" if phase == stage.peak_phase else phase
        table.add_column(header, justify="right")
    table.add_column("counted as")
    parts = sorted(stage.gpu_parts(), key=lambda part: -part.bytes)
    for part in parts:
        cells = [f"{part.gib:.3f}" if phase in part.phases else "" for phase in PHASES]
        table.add_row(escape(part.name), *cells, escape(part.how))
    table.add_section()
    totals = [
        f"[bold]{stage.gpu_bytes(phase) / GIB:.2f}[/]"
        if phase == stage.peak_phase
        else f"{stage.gpu_bytes(phase) / GIB:.2f}"
        for phase in PHASES
    ]
    table.add_row("[bold]allocated[/]", *totals, "compare the peak with a run's max allocated")
    if not est.on_cpu:
        context = f"{CUDA_CONTEXT_GIB:.2f}"
        table.add_row(
            "+ CUDA context (outside the allocator)", context, context, context, "assumed, for the fit"
        )
    activations = stage.activations
    table.caption = (
        f"activations: {stage.stage.layers} layers x {activations.kept_per_layer / GIB:.3g} GiB kept "
        f"({activations.per_layer.total / GIB:.3g} GiB per layer without recompute), "
        f"{activations.in_flight} micro batch(es) in flight"
    )
    if est.on_cpu:
        table.caption += (
            "\non CPU these are host memory, and what a tensor never writes (most of a reduce bucket) "
            "does not become resident: the process's resident memory stays below this"
        )
    table.caption_justify = "left"
    return table


def host_table(est: MemoryEstimate) -> Any:
    """Host memory of one node."""

    ranks = est.recipe.hardware.procs_per_node
    table = Table(title=f"Host memory per node ({ranks} rank(s))", title_justify="left")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    table.add_column("counted as")
    phase = est.host_peak_phase
    for part in est.host_parts_at_peak():
        table.add_row(escape(part.name), f"{part.gib * ranks:.3f}", escape(f"{ranks} x ({part.how})"))
    if est.on_cpu:
        table.add_row(
            "model states and activations",
            f"{est.cpu_model_gib() * ranks:.3f}",
            f"{ranks} x the table above, phase: {phase}",
        )
    table.add_row(
        "rank processes",
        f"{est.process_gib() * ranks:.3f}",
        f"{ranks} x {est.process_gib()} GiB (calibration constant)",
    )
    table.add_section()
    table.add_row("[bold]peak[/]", f"[bold]{est.host_peak_gib():.2f}[/]", f"phase: {phase}")
    return table


def traffic_tables(est: MemoryEstimate, link_gbps: float | None, host_gbps: float) -> list[Any]:
    """This setup's traffic per step by kind, and its total at other data-parallel sizes."""

    rows = dict(traffic_rows(est))
    own = rows[est.shape.data]
    links = _links(link_gbps)
    kinds = (
        ("all-reduce (gradients)", own.all_reduce),
        ("reduce-scatter (gradients)", own.reduce_scatter),
        ("all-gather (weights)", own.all_gather),
        ("tensor-parallel all-reduces", own.tensor_parallel),
        ("pipeline sends", own.pipeline),
        ("GPU -> CPU (offload)", own.to_host),
        ("CPU -> GPU (offload)", own.from_host),
    )
    table = Table(
        title=f"Traffic per step, per GPU ({est.shape.data} data-parallel rank(s), "
        f"{est.shape.accumulation} micro batch(es) per step)",
        title_justify="left",
    )
    table.add_column("what")
    table.add_column("GB sent", justify="right")
    for name, gbps in links:
        table.add_column(f"ms at {name} ({gbps / 8:g} GB/s)", justify="right")
    for name, sent in kinds:
        if sent:
            host = "CPU" in name
            table.add_row(
                name,
                f"{sent / GB:.3g}",
                *(f"{sent * 8 / ((host_gbps if host else gbps) * 1e9) * 1000:.1f}" for _, gbps in links),
            )
    table.add_section()
    table.add_row(
        "[bold]total[/]",
        f"{(own.between_gpus + own.host) / GB:.3g}",
        *(f"{own.seconds(gbps, host_gbps) * 1000:.1f}" for _, gbps in links),
    )
    table.caption = (
        f"GPU <-> CPU transfers at the host link ({host_gbps / 8:g} GB/s); nominal rates, NCCL reaches less. "
        "Counted as the ZeRO paper counts (ring: each rank sends (N-1)/N of a reduce-scatter or all-gather)."
        + (
            f" Not counted: DeepSpeed-Ulysses' all-to-all exchanges of queries, keys, values and attention "
            f"outputs among the {est.shape.sequence} ranks of a sequence (parallel.sequence); gradients are "
            f"reduced over data x sequence = {est.shape.reduce_ranks} ranks."
            if est.shape.sequence > 1
            else ""
        )
    )
    table.caption_justify = "left"
    scaling = Table(
        title="The same setup with other data-parallel sizes (same micro and global batch)",
        title_justify="left",
    )
    scaling.add_column("GPUs (data parallel)", justify="right")
    scaling.add_column("between GPUs GB", justify="right")
    scaling.add_column("GPU <-> CPU GB", justify="right")
    for name, _ in links:
        scaling.add_column(f"ms at {name}", justify="right")
    for size, moved in rows.items():
        label = f"{size}{' (this recipe)' if size == est.shape.data else ''}"
        if moved is None:
            scaling.add_row(label, "global batch does not divide", "", *("" for _ in links))
            continue
        scaling.add_row(
            label,
            f"{moved.between_gpus / GB:.3g}",
            f"{moved.host / GB:.3g}",
            *(f"{moved.seconds(gbps, host_gbps) * 1000:.1f}" for _, gbps in links),
        )
    return [table, scaling]


def fit_grid(fit: FitTable) -> Any:
    """Setups x micro batches: the predicted peak, coloured by whether it fits."""

    table = Table(
        title=f"Fits in {fit.gpu_memory_gib:g} GiB per GPU? predicted peak allocated (GiB)",
        title_justify="left",
    )
    table.add_column("setup")
    for micro in MICRO_BATCHES:
        table.add_column(f"micro {fit.micro_label(micro)}", justify="right")
    reasons: dict[str, str] = {}
    for setup, label in ZERO_SETUPS:
        cells = []
        for micro in MICRO_BATCHES:
            cell = fit.cells[setup, micro]
            if cell.status == INVALID:
                reasons.setdefault(label, escape(cell.reason or ""))
                text = STATUS_MARK[INVALID]
            else:
                text = f"{STATUS_MARK[cell.status]} {cell.peak_gib:.1f}"
            if (setup, micro) == fit.current:
                text = f"[underline]{text}[/]"
            cells.append(f"[{STATUS_STYLE[cell.status]}]{text}[/]")
        table.add_row(label, *cells)
    lines = [
        f"✓ fits with the allocator's reserve (+{ALLOCATOR_HEADROOM:.0%}) and the CUDA context "
        f"({CUDA_CONTEXT_GIB} GiB); ~ tight: only without the reserve; ✗ does not fit; "
        "underlined: this recipe",
        f"global batch {fit.global_batch} where micro x data parallel divides it, else the nearest multiple",
    ]
    lines += [f"— {label}: {reason}" for label, reason in reasons.items()]
    table.caption = "\n".join(lines)
    table.caption_justify = "left"
    return table
