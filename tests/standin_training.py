"""A stand-in for a real training launch (torchrun and its ranks), for tests that need no engine.

The launcher process starts --ranks rank processes and waits for them, like torchrun; each
rank starts a helper child that sleeps (like a data-loader worker), prints Megatron-like
iteration lines and sleeps between them. Options make a rank crash, a grandchild hold a known
amount of resident memory, or the launcher exit with a given code or kill itself with a
signal. Every process writes its pid to --pid-dir so a test can check that none is left.
"""

import argparse
import math
import os
import signal
import subprocess
import sys
import time


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--hold-mib", type=int, default=0, help="resident MiB each rank's helper holds")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--launcher-signal", type=int, default=0, help="signal the launcher sends itself")
    parser.add_argument("--pid-dir", default=None)
    parser.add_argument("--role", default="launcher", choices=["launcher", "rank", "helper"])
    parser.add_argument("--rank", type=int, default=0)
    return parser.parse_args()


def record_pid(args: argparse.Namespace) -> None:
    if args.pid_dir:
        with open(os.path.join(args.pid_dir, f"{os.getpid()}.pid"), "w") as out:
            out.write(args.role)


def child(args: argparse.Namespace, role: str, rank: int, **popen) -> subprocess.Popen:
    argv = [sys.executable, __file__, *sys.argv[1:], "--role", role, "--rank", str(rank)]
    return subprocess.Popen(argv, **popen)


def helper(args: argparse.Namespace) -> None:
    held = bytearray(b"\x01") * (args.hold_mib * 1024 * 1024)
    print(f"helper of rank {args.rank} holds {len(held) // 2**20} MiB", flush=True)
    while True:
        time.sleep(1)


def rank(args: argparse.Namespace) -> None:
    worker = child(args, "helper", args.rank, stdout=subprocess.PIPE, text=True)
    print(worker.stdout.readline(), end="", flush=True)  # the helper has started before training
    for iteration in range(1, args.iters + 1):
        time.sleep(args.sleep)
        if args.rank == args.crash_rank and iteration == 2:
            worker.kill()
            raise RuntimeError(f"stand-in rank {args.rank} crashed at iteration {iteration}")
        if args.rank == 0:
            loss = 11.0 * math.exp(-iteration / 20)
            print(
                f" iteration {iteration:8d}/{args.iters:8d} | elapsed time per iteration (ms): "
                f"{args.sleep * 1000:.1f} | lm loss: {loss:.6E} |",
                flush=True,
            )
    worker.kill()


def stop_as_torchrun_does(number: int, frame: object) -> None:
    """torchrun answers SIGTERM with a traceback of its own stopping."""
    print("Traceback (most recent call last):", flush=True)
    exception = "torch.distributed.elastic.multiprocessing.api.SignalException"
    print(f"{exception}: Process {os.getpid()} got signal: {number}", flush=True)
    sys.exit(1)


def launcher(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, stop_as_torchrun_does)
    ranks = [child(args, "rank", i) for i in range(args.ranks)]
    if args.launcher_signal:
        time.sleep(1.5)  # the ranks and helpers are running, and a launch has sampled them once
        os.kill(os.getpid(), args.launcher_signal)
    codes = [process.wait() for process in ranks]
    failed = [i for i, code in enumerate(codes) if code != 0]
    if failed:
        print(f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ranks {failed} failed")
        return 1
    return args.exit_code


if __name__ == "__main__":
    arguments = parse()
    record_pid(arguments)
    if arguments.role == "helper":
        helper(arguments)
    elif arguments.role == "rank":
        rank(arguments)
    else:
        sys.exit(launcher(arguments))
