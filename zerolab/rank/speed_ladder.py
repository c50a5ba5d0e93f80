"""The speed ladder: one launch in which zerolab's speed switches (zerolab.rank.speed_switches) are
switched on and off between training iterations, phase after phase, measuring in each phase the
milliseconds per iteration, the host time against the GPU time spent inside DeepSpeed's forward,
backward and step, and the peak memory; at the phases the plan names, one more iteration under
torch.profiler (GPU busy %, kernel classes, top kernels, the attention's kernels) and one under
CUDA's sync debug mode (host-device synchronisations by call site).

A patch applied at launch when ZEROLAB_LADDER names a plan (zerolab.contracts.Plan); rank 0
writes ladder.json and ladder.md into the plan's folder after every phase, so a run cut short keeps
what it measured. Instruments that need CUDA say so on a CPU and the ladder goes on. Standard
library at import (torch once the engine's training module is imported).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
import traceback
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zerolab.contracts import LADDER_ENV, LADDER_JSON, LADDER_MD, Phase, Plan, parse_plan
from zerolab.rank.import_hooks import launch_patch, patch_after_import
from zerolab.rank.speed_switches import set_on

TRAINING = "megatron.training"
DS_ENGINE = "deepspeed.runtime.engine"
PARTS = ("forward", "backward", "step")
"""DeepSpeed engine calls the ladder times inside each iteration."""
TOP_KERNELS = 12
DROPOUT_ATTRIBUTES = ("hidden_dropout", "dropout_p")
"""The engine's dropout probabilities kept as plain floats (besides its torch.nn.Dropout modules)."""

KERNEL_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("attention", r"flash|fmha|attention|sdpa|cudnn.*mha"),
        ("matmul", r"gemm|cutlass|xmma|wgmma|nvjet|cublas|matmul|sm\d+_"),
        ("communication", r"nccl"),
        ("copy", r"memcpy|memset|copy"),
        ("optimizer", r"adam|multi_tensor|foreach|lamb"),
        ("normalization, softmax, reduction", r"norm|softmax|reduce|triton_red|cross_entropy|nll"),
        ("elementwise", r"elementwise|vectorized|unrolled|pointwise|triton_poi|fill|gelu|dropout|fused"),
    )
)
"""Kernel classes by name, the first that matches; the rest is `other`."""


def read_plan(text: str) -> Plan:
    """The plan ZEROLAB_LADDER holds, its switches known; ValueError naming what is wrong."""
    plan = parse_plan(text)
    for phase in plan.phases:
        set_on(frozenset(phase.on))  # refuses an unknown switch before training starts
    set_on(frozenset())
    return plan


def ladder_wanted() -> bool:
    """Whether this launch runs the ladder; ValueError for a plan it cannot read."""
    if not os.environ.get(LADDER_ENV):
        return False
    read_plan(os.environ[LADDER_ENV])
    return True


@dataclass
class _Timing:
    """One iteration's host seconds and device event pairs inside each engine part."""

    host: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    events: dict[str, list[tuple[Any, Any]]] = field(default_factory=lambda: {part: [] for part in PARTS})


class _Ladder:
    """The running ladder of one rank: which phase an iteration belongs to, and what it measured."""

    def __init__(self, plan: Plan) -> None:
        import torch

        self.torch = torch
        self.plan = plan
        self.cuda = torch.cuda.is_available()
        self.rank = int(os.environ.get("RANK", "0"))
        self.calls = 0
        self.roles = list(self.schedule())
        self.timing: _Timing | None = None
        self.rows: list[dict[str, Any]] = []
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.inspections: dict[str, dict[str, Any]] = {}
        self.dropouts: dict[tuple[int, str], float] | None = None

    def schedule(self) -> Iterator[tuple[Phase, str]]:
        """(phase, role) for each iteration, round after round: warmup, measured, and in the
        first round profile and census."""
        for round_number in range(self.plan.rounds):
            for phase in self.plan.phases:
                yield from ((phase, "warmup") for _ in range(self.plan.warmup))
                yield from ((phase, "measured") for _ in range(self.plan.measured))
                if phase.inspect and round_number == 0:
                    yield phase, "profile"
                    yield phase, "census"

    def synchronize(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def train_step(
        self, train_step: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run one training step in its place on the ladder (past the ladder: as it is)."""
        if self.calls >= len(self.roles):
            return train_step(*args, **kwargs)
        phase, role = self.roles[self.calls]
        if self.calls == 0 or self.roles[self.calls - 1][0] is not phase:
            self.enter(phase, args[2])
        self.calls += 1
        if role == "profile":
            return self.profiled(phase, train_step, args, kwargs)
        if role == "census":
            return self.census(phase, train_step, args, kwargs)
        self.synchronize()
        self.timing = _Timing()
        started = time.perf_counter()
        result = train_step(*args, **kwargs)
        self.synchronize()
        seconds = time.perf_counter() - started
        timing, self.timing = self.timing, None
        if role == "measured":
            self.samples.setdefault(phase.name, []).append(self.sample(seconds, timing))
            following = self.roles[self.calls] if self.calls < len(self.roles) else None
            if following is None or following[0] is not phase or following[1] != "measured":
                self.close(phase)
        return result

    def enter(self, phase: Phase, model: Any) -> None:
        set_on(frozenset(phase.on))
        self.set_dropout(model, zero=phase.dropout_zero)
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def set_dropout(self, model: Any, *, zero: bool) -> None:
        """Every dropout of the model 0, or back to what the recipe set."""
        modules = [module for chunk in model for module in chunk.modules()]
        if self.dropouts is None:
            self.dropouts = {}
            for index, module in enumerate(modules):
                if isinstance(module, self.torch.nn.Dropout):
                    self.dropouts[(index, "p")] = module.p
                for name in DROPOUT_ATTRIBUTES:
                    if isinstance(getattr(module, name, None), float):
                        self.dropouts[(index, name)] = getattr(module, name)
        for (index, name), value in self.dropouts.items():
            setattr(modules[index], name, 0.0 if zero else value)

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time one engine call (forward, backward, step) of a timed iteration."""
        timing = self.timing
        if timing is None:
            yield
            return
        pair = None
        if self.cuda:
            pair = (self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True))
            pair[0].record()
        started = time.perf_counter()
        try:
            yield
        finally:
            timing.host[name] += time.perf_counter() - started
            if pair is not None:
                pair[1].record()
                timing.events[name].append(pair)

    def sample(self, seconds: float, timing: _Timing) -> dict[str, Any]:
        gpu = {
            part: (sum(start.elapsed_time(end) for start, end in pairs) if self.cuda else None)
            for part, pairs in timing.events.items()
        }
        return {
            "ms": seconds * 1e3,
            "host_ms": {part: value * 1e3 for part, value in timing.host.items()},
            "gpu_ms": gpu,
        }

    def close(self, phase: Phase) -> None:
        """Summarise the phase's measured iterations (of every round so far) into its row and
        write the results."""
        samples = self.samples[phase.name]
        ms = [sample["ms"] for sample in samples]
        peak = self.torch.cuda.max_memory_allocated() / 2**30 if self.cuda else None
        previous = next((row for row in self.rows if row["phase"] == phase.name), None)
        row: dict[str, Any] = {
            "phase": phase.name,
            "on": list(phase.on),
            "dropout_zero": phase.dropout_zero,
            "iterations": len(ms),
            "ms": [round(value, 2) for value in ms],
            "ms_median": round(statistics.median(ms), 2) if ms else None,
            "ms_min": round(min(ms), 2) if ms else None,
            "ms_max": round(max(ms), 2) if ms else None,
        }
        if ms and self.plan.tokens_per_iteration:
            row["tokens_per_s"] = round(self.plan.tokens_per_iteration / (row["ms_median"] / 1e3), 1)
        for kind in ("host_ms", "gpu_ms"):
            row[kind] = {
                part: (
                    round(statistics.median(s[kind][part] for s in samples), 2)
                    if samples and samples[0][kind][part] is not None
                    else None
                )
                for part in PARTS
            }
        if peak is not None and previous is not None and previous["peak_allocated_gib"] is not None:
            peak = max(peak, previous["peak_allocated_gib"])
        row["peak_allocated_gib"] = round(peak, 2) if peak is not None else None
        if previous is None:
            self.rows.append(row)
        else:
            self.rows[self.rows.index(previous)] = row
        self.write()

    def profiled(self, phase: Phase, train_step: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """One iteration under torch.profiler: its summary is the phase's profile."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if self.cuda else [])]
        self.synchronize()
        with profile(activities=activities) as profiler:
            started = time.perf_counter()
            result = train_step(*args, **kwargs)
            self.synchronize()
            seconds = time.perf_counter() - started
        self.inspections.setdefault(phase.name, {})["profile"] = self.profile_summary(profiler, seconds)
        self.write()
        return result

    def profile_summary(self, profiler: Any, seconds: float) -> dict[str, Any]:
        if not self.cuda:
            return {
                "gpu": "no CUDA device: GPU busy time and kernels need one; the top host operations instead",
                "wall_ms": round(seconds * 1e3, 2),
                "top_host_ops": top_host_ops(profiler),
            }
        events = profiler.events()
        kernels = [
            event
            for event in events
            if event.device_type == self.torch.autograd.DeviceType.CUDA
            and not getattr(event, "is_user_annotation", False)
            and event.time_range.elapsed_us() > 0
        ]
        summary = summarise_kernels(
            [(e.name, e.time_range.start, e.time_range.end) for e in kernels], seconds * 1e6
        )
        return summary | {"top_host_ops": top_host_ops(profiler)}

    def census(self, phase: Phase, train_step: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """One iteration under CUDA's sync debug mode: each host-device synchronisation's call site."""
        if not self.cuda:
            self.inspections.setdefault(phase.name, {})["syncs"] = {
                "note": "no CUDA device: the sync census needs one"
            }
            self.write()
            return train_step(*args, **kwargs)
        sites: Counter[str] = Counter()
        shown = warnings.showwarning

        def record(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
            if "synchronizing CUDA operation" not in str(message):
                return shown(message, category, filename, lineno, *rest)
            sites[call_site(traceback.extract_stack()[:-1])] += 1

        self.synchronize()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            self.torch.cuda.set_sync_debug_mode("warn")
            try:
                result = train_step(*args, **kwargs)
                self.synchronize()
            finally:
                self.torch.cuda.set_sync_debug_mode("default")
        self.inspections.setdefault(phase.name, {})["syncs"] = {
            "total": sum(sites.values()),
            "sites": dict(sites.most_common()),
        }
        self.write()
        return result

    def write(self) -> None:
        """ladder.json and ladder.md as measured so far (rank 0)."""
        if self.rank != 0:
            return
        out = Path(self.plan.out)
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "device": self.torch.cuda.get_device_name() if self.cuda else "cpu",
            "torch": self.torch.__version__,
            "plan": asdict(self.plan),
            "phases": self.rows,
            "inspections": self.inspections,
        }
        (out / LADDER_JSON).write_text(json.dumps(result, indent=2) + "\n")
        (out / LADDER_MD).write_text(ladder_markdown(result))


def top_host_ops(profiler: Any) -> list[dict[str, Any]]:
    """The operations that took the most host time (self CPU time) in a profiled iteration."""
    top = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [
        {"name": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 3)}
        for e in top[:TOP_KERNELS]
    ]


PASSED_THROUGH = ("warnings.py", "contextlib.py", "speed_ladder.py", "speed_switches.py")
"""Files a call site is never in: the warning machinery, and zerolab's ladder and switches, which
call the engine's own function when a switch is off (the engine's line is the call site)."""


def call_site(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame of `stack` outside torch and PASSED_THROUGH: `file:line function`."""
    for frame in reversed(stack):
        path = frame.filename.replace(os.sep, "/")
        if "/torch/" in path or path.endswith(PASSED_THROUGH):
            continue
        parts = path.split("/")
        short = "/".join(parts[-3:])
        return f"{short}:{frame.lineno} {frame.name}"
    return "(inside torch)"


def kernel_class(name: str) -> str:
    """The class of a kernel by its name (KERNEL_CLASSES), or `other`."""
    return next((label for label, pattern in KERNEL_CLASSES if pattern.search(name)), "other")


def summarise_kernels(kernels: list[tuple[str, float, float]], wall_us: float) -> dict[str, Any]:
    """GPU busy % over `wall_us` (the union of the kernels' intervals), time per kernel class, the
    top kernels and the attention's kernel names, from (name, start us, end us) of each kernel."""
    busy = 0.0
    reach = None
    for _, start, end in sorted(kernels, key=lambda k: k[1]):
        if reach is None or start > reach:
            busy += end - start
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    per_class: Counter[str] = Counter()
    per_kernel: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for name, start, end in kernels:
        per_class[kernel_class(name)] += end - start
        per_kernel[name] += end - start
        calls[name] += 1
    total = sum(per_class.values()) or 1.0
    return {
        "wall_ms": round(wall_us / 1e3, 2),
        "gpu_busy_pct": round(100.0 * busy / wall_us, 1) if wall_us else None,
        "kernel_ms": round(total / 1e3, 2),
        "classes": {
            label: {"ms": round(us / 1e3, 2), "pct": round(100.0 * us / total, 1)}
            for label, us in per_class.most_common()
        },
        "top_kernels": [
            {"name": name[:120], "calls": calls[name], "ms": round(us / 1e3, 2)}
            for name, us in per_kernel.most_common(TOP_KERNELS)
        ],
        "attention_kernels": sorted({name[:120] for name in per_kernel if kernel_class(name) == "attention"}),
    }


def _cell(value: Any) -> str:
    return "n/a" if value is None else f"{value:,.1f}" if isinstance(value, float) else str(value)


def ladder_markdown(result: dict[str, Any]) -> str:
    """The ladder as a Markdown page: one row per phase, then each inspected phase's profile and syncs."""
    rows, plan = result["phases"], result["plan"]
    base = rows[0]["ms_median"] if rows and rows[0]["ms_median"] else None
    lines = [
        f"# Speed ladder on {result['device']} (torch {result['torch']})",
        "",
        f"{plan['measured']} timed iterations per phase after {plan['warmup']} untimed, in "
        f"{plan['rounds']} round(s) of every phase; ms/iteration is the median [fastest-slowest] of "
        "them; host and GPU ms are medians per iteration inside DeepSpeed's forward, backward and "
        "step (GPU: CUDA events around each call, idle gaps included: GPU close to host means the "
        "GPU waited for the host).",
        "",
        "| phase | ms/iteration | vs first | tokens/s per GPU | forward host / GPU ms "
        "| backward host / GPU ms | step host / GPU ms | peak allocated GiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = f"{row['ms_median'] / base:.2f}x" if base and row["ms_median"] else "n/a"
        parts = [f"{_cell(row['host_ms'][part])} / {_cell(row['gpu_ms'][part])}" for part in PARTS]
        spread = f" [{_cell(row['ms_min'])}-{_cell(row['ms_max'])}]" if row.get("ms_min") is not None else ""
        tokens = _cell(row.get("tokens_per_s"))
        lines.append(
            f"| {row['phase']} | {_cell(row['ms_median'])}{spread} | {ratio} | {tokens} | "
            + " | ".join(parts)
            + f" | {_cell(row['peak_allocated_gib'])} |"
        )
    for phase, inspection in result["inspections"].items():
        lines += ["", f"## {phase}"]
        profile = inspection.get("profile")
        if profile and "gpu_busy_pct" in profile:
            lines += [
                "",
                f"GPU busy {profile['gpu_busy_pct']}% of a {profile['wall_ms']} ms iteration "
                f"({profile['kernel_ms']} ms of kernels).",
                "",
                "| kernel class | ms | % of kernel time |",
                "|---|---|---|",
                *(f"| {label} | {c['ms']} | {c['pct']} |" for label, c in profile["classes"].items()),
                "",
                "| top kernel | calls | ms |",
                "|---|---|---|",
                *(f"| `{k['name']}` | {k['calls']} | {k['ms']} |" for k in profile["top_kernels"]),
                "",
                "Attention kernels: " + (", ".join(f"`{n}`" for n in profile["attention_kernels"]) or "none"),
            ]
            lines += ["", "| host op | calls | self ms |", "|---|---|---|"]
            lines += [
                f"| `{op['name']}` | {op['calls']} | {op['self_ms']} |" for op in profile["top_host_ops"]
            ]
        elif profile:
            lines += ["", f"{profile['gpu']}.", "", "| host op | calls | self ms |", "|---|---|---|"]
            lines += [
                f"| `{op['name']}` | {op['calls']} | {op['self_ms']} |" for op in profile["top_host_ops"]
            ]
        syncs = inspection.get("syncs")
        if syncs and "sites" in syncs:
            lines += ["", f"Host-device synchronisations in one iteration: {syncs['total']}.", ""]
            lines += ["| call site | count |", "|---|---|"]
            lines += [f"| `{site}` | {count} |" for site, count in syncs["sites"].items()]
        elif syncs:
            lines += ["", f"Syncs: {syncs['note']}."]
    return "\n".join(lines) + "\n"


_running: _Ladder | None = None


def _ladder_train_step(module: types.ModuleType) -> None:
    train_step = module.train_step

    def train_step_on_the_ladder(*args: Any, **kwargs: Any) -> Any:
        global _running
        if _running is None:
            _running = _Ladder(read_plan(os.environ[LADDER_ENV]))
        return _running.train_step(train_step, args, kwargs)

    train_step_on_the_ladder.__wrapped__ = train_step  # type: ignore[attr-defined]
    module.train_step = train_step_on_the_ladder  # type: ignore[attr-defined]


def _timed_engine_parts(module: types.ModuleType) -> None:
    engine = module.DeepSpeedEngine
    for name in PARTS:
        method = getattr(engine, name)

        def timed(
            self: Any, *args: Any, _method: Callable[..., Any] = method, _name: str = name, **kwargs: Any
        ) -> Any:
            if _running is None:
                return _method(self, *args, **kwargs)
            with _running.part(_name):
                return _method(self, *args, **kwargs)

        timed.__wrapped__ = method  # type: ignore[attr-defined]
        setattr(engine, name, timed)


def speed_ladder() -> None:
    """Run ZEROLAB_LADDER's speed ladder: switches turned between iterations, each phase measured."""
    patch_after_import(TRAINING, _ladder_train_step)
    patch_after_import(DS_ENGINE, _timed_engine_parts)


SPEED_LADDER = launch_patch(speed_ladder, ladder_wanted, kind="patch")
