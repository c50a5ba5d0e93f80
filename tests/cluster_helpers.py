"""A real two-node SLURM cluster on this one machine, for the cluster tests: two Linux network
namespaces joined by a veth pair with private addresses (nothing in the machine's own network
changes), Debian's slurm-wlm (slurmctld on node1, one slurmd per node), one munged, and an sshd per
node for pdsh. Each node's processes also get their own hostname and, by private bind mounts,
their own /etc/hosts (node1, node2), /etc/resolv.conf (no DNS: lookups fail at once instead of
timing out) and /etc/ssh/ssh_config (the cluster's key, no host-key prompts); the machine's files
stay as they are. Everything lives in one state directory; `down` kills every process in the
namespaces, deletes them and the directory, and `up` first clears what an earlier, killed session
left (namespaces are named with PREFIX).

Needs root on Linux and the packages of `make cluster-setup`; `unavailable()` says why not."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PREFIX = "zerolab-node"
"""Network namespaces are PREFIX1 and PREFIX2."""
NODES = ("node1", "node2")
ADDRESSES = {"node1": "10.231.0.1", "node2": "10.231.0.2"}
"""Private addresses, on a link that exists only between the two namespaces."""
PROGRAMS = ("ip", "nsenter", "unshare", "munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sshd", "pdsh")
SETUP_HINT = "run `make cluster-setup` (as root: apt-get install slurm-wlm munge openssh-server pdsh)"
PRIVSEP_DIR = Path("/run/sshd")
"""sshd's privilege-separation directory (fixed at its build); made if missing, removed after."""


def unavailable() -> str | None:
    """Why the cluster cannot be built here, or None."""
    if sys.platform != "linux":
        return "the cluster tests need Linux network namespaces"
    if os.geteuid() != 0:
        return "the cluster tests need root (network namespaces, slurmd)"
    missing = [program for program in PROGRAMS if shutil.which(program, path=_path()) is None]
    if missing:
        return f"the cluster tests need {', '.join(missing)}: {SETUP_HINT}"
    probe = f"{PREFIX}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True, check=False)
    return None


def _path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


@dataclass
class Cluster:
    """A running two-node cluster (`up`), to run commands on as a node (`run`, `popen`)."""

    state: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zerolab-cluster-")))
    made_privsep: bool = False

    @property
    def slurm_conf(self) -> Path:
        return self.state / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment, pointed at the cluster's slurm.conf."""
        return {**os.environ, "PATH": _path(), "SLURM_CONF": str(self.slurm_conf)}

    def as_node(self, node: str, argv: list[str]) -> list[str]:
        """`argv` run as `node`: in its network namespace, with its hostname and files."""
        binds = {
            "hosts": "/etc/hosts",
            "resolv.conf": "/etc/resolv.conf",
            "ssh/ssh_config": "/etc/ssh/ssh_config",
        }
        mounts = " && ".join(f"mount --bind {self.state / name} {target}" for name, target in binds.items())
        script = f'{mounts} && hostname {node} && exec "$@"'
        return [
            "nsenter", f"--net=/run/netns/{_namespace(node)}",
            "unshare", "--mount", "--uts", "--propagation", "private", "--",
            "bash", "-c", script, node, *argv,
        ]  # fmt: skip

    def run(
        self, node: str, argv: list[str], *, timeout: float = 120, **kwargs
    ) -> subprocess.CompletedProcess:
        """Run `argv` as `node` to its end (text output captured unless said otherwise)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("env", self.env)
        return subprocess.run(self.as_node(node, argv), text=True, timeout=timeout, check=False, **kwargs)

    def popen(self, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` as `node`."""
        kwargs.setdefault("env", self.env)
        return subprocess.Popen(self.as_node(node, argv), text=True, **kwargs)

    def up(self, timeout: float = 60) -> None:
        """Build the network, write the configuration, start the daemons and wait until SLURM
        sees both nodes idle. On failure, everything started is torn down."""
        clear_leftovers(keep=self.state)
        try:
            self._network()
            self._files()
            self._daemons()
            self.wait_idle(timeout)
        except BaseException:
            self.down()
            raise

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until both nodes are idle (no job left on them); AssertionError with sinfo's view."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.run("node1", ["sinfo", "--noheader", "--Node", "--format=%N %T"], timeout=30).stdout
            states = dict(line.split() for line in seen.splitlines() if line.strip())
            if all(states.get(node) == "idle" for node in NODES):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"SLURM's nodes are not idle after {timeout:.0f} s: {states}\n{self.logs()}"
                )
            time.sleep(0.5)

    def logs(self) -> str:
        """The daemons' logs, last lines each (for failure messages)."""
        parts = []
        for log in sorted((self.state / "log").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def processes(self, node: str) -> list[psutil.Process]:
        """Every process in `node`'s network namespace."""
        return _namespace_processes(_namespace(node))

    def leftovers(self) -> list[str]:
        """What of the cluster is still there (after `down`: nothing)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
        left = [
            f"namespace {line.split()[0]}" for line in listed.stdout.splitlines() if line.startswith(PREFIX)
        ]
        if self.state.exists():
            left.append(f"state directory {self.state}")
        if self.made_privsep and PRIVSEP_DIR.exists():
            left.append(str(PRIVSEP_DIR))
        return left

    def down(self) -> None:
        """Kill every process of the cluster, delete its namespaces and its state directory."""
        for node in NODES:
            _delete_namespace(_namespace(node))
        if self.made_privsep:
            shutil.rmtree(PRIVSEP_DIR, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)

    def _network(self) -> None:
        for node in NODES:
            _ip("netns", "add", _namespace(node))
            _ip("-n", _namespace(node), "link", "set", "lo", "up")
        one, two = NODES
        _ip("link", "add", "zl-eth1", "netns", _namespace(one), "type", "veth",
            "peer", "name", "zl-eth2", "netns", _namespace(two))  # fmt: skip
        for node, link in zip(NODES, ("zl-eth1", "zl-eth2"), strict=True):
            _ip("-n", _namespace(node), "addr", "add", f"{ADDRESSES[node]}/24", "dev", link)
            _ip("-n", _namespace(node), "link", "set", link, "up")

    def _files(self) -> None:
        state = self.state
        state.chmod(0o755)  # munged wants its socket's directories open to all
        for directory in ("log", "slurmctld", "ssh", "munge", *(f"slurmd/{node}" for node in NODES)):
            (state / directory).mkdir(parents=True, exist_ok=True)
        (state / "munge").chmod(0o755)
        key = state / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{ADDRESSES[node]} {node}\n" for node in NODES)
        (state / "hosts").write_text(hosts)
        (state / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        self.slurm_conf.write_text(_slurm_conf(state))
        ssh = state / "ssh"
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / name)], check=True)
        shutil.copy(ssh / "client_key.pub", ssh / "authorized_keys")
        (ssh / "sshd_config").write_text(
            f"HostKey {ssh / 'host_key'}\nPidFile {ssh}/sshd.pid\n"
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "StrictModes no\nUsePAM no\nPrintMotd no\n"
        )
        (ssh / "ssh_config").write_text(
            f"Host *\n  IdentityFile {ssh / 'client_key'}\n  UserKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking no\n  BatchMode yes\n  LogLevel ERROR\n"
        )
        if not PRIVSEP_DIR.exists():
            PRIVSEP_DIR.mkdir(mode=0o755)
            self.made_privsep = True

    def _daemons(self) -> None:
        state = self.state
        munge = state / "munge"
        self._start(
            "node1",
            ["munged", f"--socket={munge}/munge.sock", f"--key-file={munge}/munge.key",
             f"--pid-file={munge}/munged.pid", f"--log-file={state}/log/munged.log",
             f"--seed-file={munge}/seed"],
        )  # fmt: skip
        self._start("node1", ["slurmctld", "-f", str(self.slurm_conf)])
        for node in NODES:
            self._start(node, ["slurmd", "-f", str(self.slurm_conf), "-N", node])
            self._start(
                node,
                [
                    "/usr/sbin/sshd",
                    "-f",
                    str(state / "ssh" / "sshd_config"),
                    "-E",
                    f"{state}/log/sshd-{node}.log",
                ],
            )

    def _start(self, node: str, argv: list[str]) -> None:
        """Start a daemon (it detaches itself); AssertionError with its output if it fails to."""
        started = self.run(node, argv, timeout=30)
        assert started.returncode == 0, f"{argv[0]} did not start on {node}: {started.stdout}{started.stderr}"


def _slurm_conf(state: Path) -> str:
    nodes = "".join(f"NodeName={node} NodeAddr={ADDRESSES[node]} CPUs=2 State=UNKNOWN\n" for node in NODES)
    return f"""ClusterName=zerolab
SlurmctldHost=node1({ADDRESSES["node1"]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this + 1 s before it starts again (default 120 s)
AuthInfo=socket={state}/munge/munge.sock,cred_expire=10
StateSaveLocation={state}/slurmctld
SlurmdSpoolDir={state}/slurmd/%n
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd-%n.pid
SlurmctldLogFile={state}/log/slurmctld.log
SlurmdLogFile={state}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=10
KillWait=5
# a requeued job, or an array's next task, is started within a second (defaults: 60 s, 30 s)
SchedulerParameters=sched_interval=1,bf_interval=1
MinJobAge=600
{nodes}PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _namespace(node: str) -> str:
    return f"{PREFIX}{NODES.index(node) + 1}"


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


def _namespace_processes(namespace: str) -> list[psutil.Process]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
    processes = []
    for pid in listed.stdout.split():
        with contextlib.suppress(psutil.NoSuchProcess):
            processes.append(psutil.Process(int(pid)))
    return processes


def _delete_namespace(namespace: str) -> None:
    """Kill every process in the namespace (until none is left), then delete it."""
    for _ in range(20):
        processes = _namespace_processes(namespace)
        if not processes:
            break
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=5)
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, check=False)


def clear_leftovers(keep: Path) -> None:
    """Delete the namespaces (and kill the processes) and the state directories an earlier
    session left behind; `keep` is this cluster's state directory."""
    for stale in Path(tempfile.gettempdir()).glob("zerolab-cluster-*"):
        if stale != keep:
            shutil.rmtree(stale, ignore_errors=True)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            _delete_namespace(name)
