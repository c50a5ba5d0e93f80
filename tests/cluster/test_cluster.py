"""The multi-node launches on a real two-node cluster (tests/cluster_helpers.py: two network
namespaces, Debian's slurm-wlm and munge, an sshd per node): the tiny GPT-2 on 2 nodes x 1 rank
over gloo through `zerolab launch --slurm` (a requeued job resuming, a rank lost on one node),
`zerolab sweep --slurm` (an array job), the deepspeed launcher over pdsh/ssh and torchrun's
rendezvous. Skipped, with the reason, where the cluster cannot be built (not root, no network
namespaces, packages missing: `make cluster-setup`) or the engine is not set up."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cluster_helpers import Cluster, unavailable
from engine_runs import SHORT, Trained

from zerolab import rundir
from zerolab.logs.parse import parse_log

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "zerolab" / "assets" / "gpt2"
TWO_NODES = [
    "hardware.nodes=2",
    "hardware.procs_per_node=1",
    f"data.vocab_file={ASSETS / 'vocab.json'}",
    f"data.merge_file={ASSETS / 'merges.txt'}",
]
"""The shared z1 run's recipe on 2 nodes x 1 rank (absolute tokenizer files: jobs start elsewhere)."""
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def cluster(engine) -> Iterator[Cluster]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    built = Cluster()
    built.up()
    try:
        yield built
    finally:
        built.down()
        assert not built.leftovers(), f"the cluster left {built.leftovers()}"


def zerolab(*words: str) -> list[str]:
    return [sys.executable, "-m", "zerolab", *words]


def z1_words(dataset: str, *overrides: str) -> list[str]:
    return ["cpu/tiny_z1", f"data.path={dataset}", *SHORT, *TWO_NODES, *overrides]


def losses(run_dir: Path) -> list[float]:
    return list(parse_log(run_dir / rundir.LOG_FILE).iterations["loss"])


def assert_losses_of(run_dir: Path, one_node: Trained) -> None:
    """The two-node run's losses are the one-node two-rank run's (the same arithmetic, only the
    ranks' placement differs)."""
    got = losses(run_dir)
    assert len(got) == len(one_node.losses)
    assert all(abs(a - b) <= 1e-5 for a, b in zip(got, one_node.losses, strict=True)), (got, one_node.losses)


def assert_two_nodes_in_summary(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "summary"
    done = subprocess.run(
        zerolab("summarize", str(run_dir), "--out", str(out)), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    row = json.loads((out / "summary.json").read_text())["runs"][0]
    assert (row["world_size"], row["nodes"]) == (2, 2), row


def slurm_run_dir(cwd: Path) -> Path:
    found = sorted((cwd / "logs").glob("*/slurm-*/"))
    assert len(found) == 1, found
    return found[0]


def launch_slurm(cluster: Cluster, words: list[str], cwd: Path) -> subprocess.Popen:
    """`zerolab launch WORDS --slurm` started on node1 (the login node) from `cwd`."""
    argv = zerolab("launch", *words, "--slurm")
    return cluster.popen("node1", argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def is_rank(process: psutil.Process, rank: int) -> bool:
    """The engine's rank `rank` itself (not its data-loader workers, which share its environment)."""
    return process.environ().get("RANK") == str(rank) and process.parent().environ().get("RANK") != str(rank)


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.2)


def test_a_lost_rank_fails_the_job_naming_its_node_and_signal_and_the_next_job_resumes_when_requeued(
    cluster, dataset, tmp_path
):
    lost = tmp_path / "lost"
    lost.mkdir()
    words = z1_words(dataset, "train.iters=60", "train.save_interval=null")
    job = launch_slurm(cluster, words, lost)
    wait_for(lambda: list((lost / "logs").glob("*/slurm-*/train.log")), "the job's train.log")
    log = slurm_run_dir(lost) / rundir.LOG_FILE
    at_2 = lambda: "iteration        2/" in log.read_text(errors="replace")  # noqa: E731
    wait_for(lambda: at_2() or job.poll() is not None, "iteration 2")
    assert job.poll() is None, log.read_text(errors="replace")[-3000:]  # the job ended before iteration 2
    rank1 = [process for process in cluster.processes("node2") if is_rank(process, 1)]
    assert len(rank1) == 1, [process.cmdline() for process in cluster.processes("node2")]
    killed_at = time.monotonic()
    rank1[0].send_signal(signal.SIGKILL)
    output, _ = job.communicate(timeout=120)
    took = time.monotonic() - killed_at
    status = json.loads((slurm_run_dir(lost) / rundir.STATUS_FILE).read_text())
    assert job.returncode != 0 and status["state"] == "failed", output[-3000:]
    assert "rank 1 on node2 killed by SIGKILL (signal 9)" in status["cause"], status
    assert took < 60, f"the launch took {took:.0f} s to end after the rank died"

    # the next job on the same nodes, requeued after its first checkpoint
    cluster.wait_idle()
    following = tmp_path / "next"
    following.mkdir()
    words = z1_words(dataset, "train.iters=8", "train.save_interval=2")
    job = launch_slurm(cluster, words, following)
    wait_for(lambda: list((following / "logs").glob("*/slurm-*/")), "the job's run directory")
    run_dir = slurm_run_dir(following)
    wait_for(lambda: (rundir.last_checkpoint(run_dir) or 0) >= 2, "the first checkpoint")
    job_id = run_dir.name.removeprefix("slurm-")
    requeued = cluster.run("node1", ["scontrol", "requeue", job_id])
    assert requeued.returncode == 0, requeued.stderr
    output, _ = job.communicate(timeout=TIMEOUT_S)
    assert job.returncode == 0, output[-3000:]
    assert f"job {job_id} pending" in output.split("running on node[1-2]", 1)[1], output[-3000:]
    status = json.loads((run_dir / rundir.STATUS_FILE).read_text())
    assert (
        status["state"] == "completed" and status["exit_code"] == 0 and rundir.last_checkpoint(run_dir) == 8
    )
    assert (run_dir / "hostfile").read_text() == "node1 slots=1\nnode2 slots=1\n"
    text = (run_dir / rundir.LOG_FILE).read_text()
    loaded = re.findall(r"successfully loaded checkpoint from \S+ at iteration (\d+)", text)
    assert len(loaded) == 1 and int(loaded[0]) >= 2 and int(loaded[0]) % 2 == 0, loaded
    resumed_from = int(loaded[0])
    before, after = text.split("successfully loaded checkpoint")
    logged_after = [int(i) for i in re.findall(r"^ iteration +(\d+)/", after, re.MULTILINE)]
    assert logged_after == list(range(resumed_from + 1, 9)), logged_after
    assert re.findall(r"^ iteration +(\d+)/", before, re.MULTILINE)[:1] == ["1"]
    assert_two_nodes_in_summary(run_dir, tmp_path)


def test_a_sweep_runs_as_one_array_job_each_cell_on_both_nodes(cluster, dataset, trained, tmp_path):
    """Its cells: the z1 run under each launcher (deepspeed: every node starts its own rank)."""
    words = [*z1_words(dataset), "hardware.launcher=torchrun,deepspeed", "--name", "two-nodes", "--slurm"]
    written = cluster.run("node1", zerolab("sweep", *words), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    sweep = tmp_path / "logs" / "sweeps" / "two-nodes"
    submitted = cluster.run("node1", ["sbatch", "--parsable", str(sweep / "sweep.sbatch")], cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    queued = lambda: cluster.run("node1", ["squeue", "--noheader", "--jobs", job]).stdout.strip()  # noqa: E731
    wait_for(lambda: not queued(), "the array job", timeout=TIMEOUT_S)
    done = subprocess.run(zerolab("summarize", str(sweep)), capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads((sweep / "summary.json").read_text())["runs"]
    assert sorted(row["sweep"]["hardware.launcher"] for row in rows) == ["deepspeed", "torchrun"], rows
    for row in rows:
        assert row["cause"] is None and (row["world_size"], row["nodes"]) == (2, 2), row
        assert_losses_of(tmp_path / row["path"], trained("z1"))


def test_the_deepspeed_launcher_starts_the_other_node_over_ssh(cluster, dataset, trained, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node1 slots=1\nnode2 slots=1\n")
    words = z1_words(
        dataset, "hardware.launcher=deepspeed", f"hardware.hostfile={hostfile}", "hardware.master_addr=node1"
    )
    run_dir = tmp_path / "run"
    done = cluster.run(
        "node1", zerolab("launch", *words, "--run-dir", str(run_dir)), cwd=tmp_path, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout[-3000:]
    text = (run_dir / rundir.LOG_FILE).read_text()
    assert re.search(r"^node2: .* exits successfully", text, re.MULTILINE), "no rank ran on node2"
    (pdsh,) = [line for line in text.splitlines() if "cmd = pdsh" in line]
    assert "export DS_ACCELERATOR=cpu; export OMP_NUM_THREADS=1;" in pdsh  # deepspeed_env, on both nodes
    assert_losses_of(run_dir, trained("z1"))
    assert_two_nodes_in_summary(run_dir, tmp_path)


def test_torchrun_meets_at_node1s_rendezvous(cluster, dataset, trained, tmp_path):
    starts = {
        node: cluster.popen(
            node,
            zerolab(
                "launch",
                *z1_words(dataset, f"hardware.node_rank={rank}", "hardware.master_addr=node1"),
                "--run-dir",
                str(tmp_path / node),
            ),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank, node in enumerate(("node1", "node2"))
    }
    for node, start in starts.items():
        output, _ = start.communicate(timeout=TIMEOUT_S)
        assert start.returncode == 0, (node, output[-3000:])
    logged = next(tmp_path / node for node in starts if losses(tmp_path / node))
    assert_losses_of(logged, trained("z1"))
    assert_two_nodes_in_summary(logged, tmp_path)


def test_an_fsdp2_recipe_trains_on_both_nodes_through_slurm_as_on_one(cluster, dataset, tmp_path):
    """The second engine through the same backend: its torchrun on each node meets node1's, and the
    two-node run trains the losses of the same recipe on one node's two ranks."""
    words = ["cpu/tiny_fsdp2_z3", f"data.path={dataset}", *SHORT]
    one_node = tmp_path / "one-node"
    done = subprocess.run(
        zerolab("launch", *words, "--run-dir", str(one_node)),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job = launch_slurm(cluster, [*words, *TWO_NODES], tmp_path)
    output, _ = job.communicate(timeout=TIMEOUT_S)
    assert job.returncode == 0, output[-3000:]
    run_dir = slurm_run_dir(tmp_path)
    got, want = losses(run_dir), losses(one_node)
    assert len(got) == len(want) == 3 and all(abs(a - b) <= 1e-5 for a, b in zip(got, want, strict=True)), (
        got,
        want,
    )
    assert_two_nodes_in_summary(run_dir, tmp_path)
    assert json.loads((run_dir / rundir.RUN_FILE).read_text())["engine"] == "fsdp2"


def test_hpz_within_each_node_and_mics_shards_per_node_train_zero3s_losses_across_both(
    cluster, dataset, tmp_path
):
    """The multi-node case ZeRO++ and MiCS exist for, 2 nodes x 2 ranks: hpZ's secondary weight
    partition within each node (zero.hpz_partition_size 2) and MiCS's model states sharded per node
    and replicated across the two (zero.mics_shard_size 2) train the losses of plain ZeRO-3 on the
    same four ranks."""
    two_by_two = ["hardware.nodes=2", "hardware.procs_per_node=2", *TWO_NODES[2:]]
    trained = {}
    for recipe in ("cpu/tiny_z3", "cpu/tiny_z3_hpz", "cpu/tiny_z3_mics"):
        cwd = tmp_path / recipe.split("/")[1]
        cwd.mkdir()
        job = launch_slurm(cluster, [recipe, f"data.path={dataset}", *SHORT, *two_by_two], cwd)
        output, _ = job.communicate(timeout=TIMEOUT_S)
        assert job.returncode == 0, output[-3000:]
        run_dir = slurm_run_dir(cwd)
        facts = json.loads((run_dir / rundir.RUN_FILE).read_text())
        assert (facts["world_size"], facts["nodes"]) == (4, 2)
        trained[recipe] = losses(run_dir)
    zero3 = trained["cpu/tiny_z3"]
    for recipe in ("cpu/tiny_z3_hpz", "cpu/tiny_z3_mics"):
        got = trained[recipe]
        assert len(got) == len(zero3) and all(abs(a - b) <= 1e-4 for a, b in zip(got, zero3, strict=True)), (
            recipe,
            got,
            zero3,
        )
