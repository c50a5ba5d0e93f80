"""zerolab.rank.prompt_exit: an engine process ends as a normal exit would, without the
interpreter's teardown, and never waits forever."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from zerolab.locations import REPO_ROOT

SCRIPT = textwrap.dedent(
    """
    import atexit, threading
    from concurrent.futures import ThreadPoolExecutor
    from zerolab.rank.prompt_exit import exit_now

    pool = ThreadPoolExecutor(2)  # as torch.compile keeps one, its workers idle at the end
    pool.submit(sum, [1, 2]).result()
    worker = threading.Thread(target=lambda: print("worker done", flush=True))
    atexit.register(lambda: print("atexit ran", flush=True))
    worker.start()
    exit_now(3)
    """
)


def test_a_process_with_an_idle_thread_pool_ends_with_its_code_after_its_atexit_functions():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines() == ["worker done", "atexit ran"]
