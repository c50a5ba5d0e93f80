"""How many nodes and ranks a launch runs, read from its command line as each launcher counts them:
torchrun and `python -m torch.distributed.launch/run` (--nnodes x --nproc_per_node), DeepSpeed's
launcher (--num_nodes, --num_gpus, --include), mpiexec and mpirun (-n/-np with --ppn, -ppn,
--npernode, -N or --map-by ppr:P:node), srun (--ntasks, --nodes, --ntasks-per-node), jsrun (--nrs x
--tasks_per_rs, --rs_per_host) and aprun (-n, -N); a per-node launcher inside a process launcher
(srun ... torchrun ...) runs its ranks on each of the outer one's nodes. Batch directives in the
same text (#SBATCH, #PBS -l select=, #BSUB -nnodes, ABCI's #$ -l rt_F=) give the nodes a launcher
leaves to the allocation. The user's --nodes / --gpus-per-node override what is read; a launch
whose ranks cannot be known is refused, asking for them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from zerolab.errors import UserError

PER_NODE = ("torchrun", "deepspeed")
"""Launchers that start the ranks of one node each (torch.distributed.launch/run count as torchrun)."""
PROCESS = ("mpiexec", "mpirun", "srun", "jsrun", "aprun")
"""Launchers that start processes across the allocation's nodes."""
TORCH_MODULES = ("torch.distributed.launch", "torch.distributed.run")
DEFAULT_GPUS_PER_NODE = 8
"""The ranks of a node where nothing says otherwise: bare deepspeed's every GPU of an 8-GPU node."""


@dataclass(frozen=True)
class Layout:
    """Nodes and ranks per node, and where they were read from."""

    nodes: int
    procs_per_node: int
    how: str

    @property
    def world(self) -> int:
        return self.nodes * self.procs_per_node


@dataclass(frozen=True)
class Segment:
    """One launcher of a command line and its options (flag -> value; a flag alone maps to "")."""

    name: str
    options: dict[str, str]

    def get(self, *names: str) -> str | None:
        """The value of the first of `names` given."""
        return next((self.options[name] for name in names if name in self.options), None)

    def count(self, *names: str) -> int | None:
        """The whole number the first of `names` gives, None when none is given; UserError for a
        value that is no count (the launch's own shell expression failed, say)."""
        for name in names:
            if name in self.options:
                value = self.options[name]
                if not value.isdigit() or int(value) < 1:
                    raise UserError(
                        f"{self.name} {name} {value!r}: not a count of ranks or nodes (a shell expression "
                        "of your launch that gave nothing?): give --nodes N and --gpus-per-node M"
                    )
                return int(value)
        return None


def segments(launcher: list[str]) -> list[Segment]:
    """The launchers in the words before pretrain_gpt.py, outermost first, each with its options."""
    found: list[Segment] = []
    words = launcher[:-1] if launcher and launcher[-1].endswith(".py") else launcher
    index = 0
    while index < len(words):
        word = words[index]
        base = Path(word).name
        if base == "-m" and index + 1 < len(words) and words[index + 1] in TORCH_MODULES:
            found.append(Segment("torchrun", {}))
            index += 2
            continue
        if base in PER_NODE or base in PROCESS:
            found.append(Segment(base, {}))
        elif found and word.startswith("-"):
            name, equals, value = word.partition("=")
            if not equals and not name.startswith("--") and len(name) > 2 and name[2:].isdigit():
                name, value = name[:2], name[2:]  # -n8
            takes = not equals and not value and index + 1 < len(words)
            if (
                takes
                and not words[index + 1].startswith("-")
                and Path(words[index + 1]).name
                not in (
                    *PER_NODE,
                    *PROCESS,
                    "python",
                    "python3",
                    "bash",
                )
            ):
                value = words[index + 1]
                index += 1
            found[-1].options.setdefault(name, value)
        index += 1
    return found


def directive_nodes(text: str) -> tuple[int | None, str]:
    """The nodes the batch directives in `text` allocate, and the directive (None, "" where none)."""
    patterns = (
        r"^#SBATCH\b.*?(?:--nodes[= ]|-N ?)(\d+)",
        r"^#PBS\b.*?select=(\d+)",
        r"^#BSUB\b.*?-nnodes (\d+)",
        r"^#\$.*?-l rt_[A-Za-z]+=(\d+)",
    )
    for line in text.splitlines():
        for pattern in patterns:
            found = re.search(pattern, line.strip())
            if found:
                return int(found.group(1)), line.strip()
    return None, ""


def directive_tasks_per_node(text: str) -> int | None:
    """`#SBATCH --ntasks-per-node=N` where the text has it."""
    found = re.search(r"^#SBATCH\b.*?--ntasks-per-node[= ](\d+)", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def launch_layout(
    launcher: list[str],
    text: str = "",
    *,
    gpus_per_node: int | None = None,
    nodes: int | None = None,
    default_gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> Layout:
    """The launch's layout: `nodes` and `gpus_per_node` where the user gives them, else as read from
    the launcher words and the batch directives of `text`."""
    if nodes is not None and gpus_per_node is not None:
        return Layout(nodes, gpus_per_node, "as given (--nodes, --gpus-per-node)")
    python = any(Path(word).name.startswith("python") for word in launcher)
    gpus = gpus_per_node or default_gpus_per_node
    try:
        read = _read(segments(launcher), text, gpus, gpus_per_node is not None, python)
    except UserError:
        if nodes is None:
            raise
        return Layout(nodes, gpus, f"--nodes {nodes} as given, {gpus} ranks a node (--gpus-per-node)")
    if nodes is not None:
        return Layout(nodes, read.procs_per_node, f"--nodes {nodes} as given; {read.how}")
    if gpus_per_node is not None and read.procs_per_node != gpus_per_node:
        return Layout(read.world // gpus_per_node, gpus_per_node, f"--gpus-per-node as given; {read.how}")
    return read


def _read(found: list[Segment], text: str, gpus: int, gpus_given: bool, python: bool) -> Layout:
    allocated, directive = directive_nodes(text)
    inner = next((segment for segment in reversed(found) if segment.name in PER_NODE), None)
    outer = next((segment for segment in found if segment.name in PROCESS), None)
    if inner is not None:
        return _per_node(inner, outer, allocated, directive, gpus, gpus_given)
    if outer is not None:
        return _processes(outer, allocated, directive, text, gpus)
    if allocated:
        return Layout(allocated, gpus, f"{directive}: {allocated} node(s) of {gpus} ranks (--gpus-per-node)")
    if python:
        return Layout(1, 1, "python alone: one process")
    return Layout(1, gpus, f"one node of {gpus} ranks (--gpus-per-node{'' if gpus_given else ' default'})")


def _per_node(
    inner: Segment, outer: Segment | None, allocated: int | None, directive: str, gpus: int, gpus_given: bool
) -> Layout:
    """torchrun's or deepspeed's ranks on each node, the nodes its own flags name or else the outer
    launcher's or the allocation's."""
    if inner.name == "deepspeed":
        include = inner.get("--include", "-i")
        if include:
            hosts = [part.split(":") for part in include.split("@") if part]
            counts = {len(host[1].split(",")) if len(host) > 1 else gpus for host in hosts}
            if len(counts) == 1:
                return Layout(len(hosts), counts.pop(), f"deepspeed --include {include}")
        procs = inner.count("--num_gpus", "--num-gpus") or gpus
        named = inner.count("--num_nodes", "--num-nodes")
        what = "deepspeed" + (f" --num_gpus {procs}" if inner.get("--num_gpus", "--num-gpus") else "")
    else:
        procs = inner.count("--nproc_per_node", "--nproc-per-node") or 1
        nnodes = inner.get("--nnodes")
        if nnodes and ":" in nnodes:  # elastic MIN:MAX: the launch runs MAX
            nnodes = nnodes.split(":")[1]
        named = Segment("torchrun", {"--nnodes": nnodes}).count("--nnodes") if nnodes else None
        what = f"torchrun --nproc_per_node {procs}"
        if named is None and outer is None and not allocated:
            named = 1  # torchrun's own default
    if named is not None:
        return Layout(named, procs, f"{what} on {named} node(s)")
    if outer is not None:
        outer_nodes = outer.count("--nodes", "-N") if outer.name == "srun" else None
        if outer_nodes:
            return Layout(outer_nodes, procs, f"{outer.name} --nodes {outer_nodes} x {what}")
    if allocated:
        return Layout(allocated, procs, f"{directive}: {allocated} node(s) x {what}")
    hostfile = inner.get("--hostfile", "-H")
    if inner.name == "deepspeed" and hostfile:
        raise UserError(
            f"deepspeed --hostfile {hostfile}: the launch runs one node per line of that file, which the "
            "porter cannot read: give --nodes N (and --gpus-per-node M where a node runs other than "
            f"{procs})"
        )
    return Layout(1, procs, f"{what} on one node")


def _processes(outer: Segment, allocated: int | None, directive: str, text: str, gpus: int) -> Layout:
    """An MPI-style launcher starting every rank itself: its total and per-node counts."""
    name = outer.name
    if name == "jsrun":
        sets, tasks = outer.count("--nrs", "-n"), outer.count("--tasks_per_rs", "-a") or 1
        per_host = outer.count("--rs_per_host", "-r")
        world = sets * tasks if sets else None
        per_node = per_host * tasks if per_host else None
        flags = f"jsrun --nrs {sets} --tasks_per_rs {tasks}"
    elif name == "srun":
        world = outer.count("--ntasks", "-n")
        per_node = outer.count("--ntasks-per-node") or directive_tasks_per_node(text)
        nodes = outer.count("--nodes", "-N") or allocated
        if world is None and per_node and nodes:
            world = per_node * nodes
        if per_node is None and world and nodes:
            per_node = world // nodes
        flags = f"srun --ntasks {world}"
    elif name == "aprun":
        world, per_node = outer.count("-n"), outer.count("-N")
        flags = f"aprun -n {world}"
    else:  # mpiexec, mpirun: MPICH/PALS --ppn, Intel -ppn/-perhost, Open MPI --npernode, -N, --map-by
        world = outer.count("-n", "-np", "--np", "--n")
        per_node = outer.count("--ppn", "-ppn", "--npernode", "-npernode", "-perhost", "-N")
        mapping = re.fullmatch(r"ppr:(\d+):node.*", outer.get("--map-by") or "")
        per_node = per_node or (int(mapping.group(1)) if mapping else None)
        flags = f"{name} -n {world}"
    if world is None:
        raise UserError(
            f"{name}: the launch names no count of ranks (its -n or the allocation's): give --nodes N and "
            "--gpus-per-node M"
        )
    if per_node is None:
        if allocated and world % allocated == 0:
            return Layout(allocated, world // allocated, f"{flags} on {directive}")
        per_node = min(world, gpus)
        if world % per_node:
            raise UserError(
                f"{flags}: {world} ranks are not whole nodes of {per_node} (--gpus-per-node): give --nodes N "
                "and --gpus-per-node M"
            )
        return Layout(world // per_node, per_node, f"{flags}, {per_node} a node (--gpus-per-node)")
    if world % per_node:
        raise UserError(f"{flags} with {per_node} a node: {world} ranks are not whole nodes")
    return Layout(world // per_node, per_node, f"{flags}, {per_node} a node")
