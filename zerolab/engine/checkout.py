"""A git checkout of one pinned commit, fetched from upstream or from a local git directory
(bare or a checkout, named by an environment variable such as ZEROLAB_ENGINE_SRC): how `make
setup` gets Megatron-DeepSpeed and apex. Standard library only: the image's build runs it
before zerolab's own dependencies are installed."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from zerolab.errors import UserError


def checkout_commit(directory: Path) -> str | None:
    """The commit checked out in `directory`, or None when it is not a git checkout."""
    result = subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def ensure_checkout(
    target: Path, commit: str, source: str, *, what: str, variable: str, say: Callable[[str], object] = print
) -> bool:
    """Make `target` a checkout of `commit` of `what` from `source` (a URL or a local git
    directory; `variable` is the environment variable that names a local one); True when it
    had to be fetched. An existing checkout at another commit is an error, never overwritten."""
    if target.exists():
        found = checkout_commit(target)
        if found == commit:
            say(f"  {what} {commit[:12]} already at {target}")
            return False
        state = f"is at commit {found}" if found else "is not a git checkout"
        raise UserError(
            f"{target} {state}, but pins.toml pins {what} at {commit}. "
            "Move it away and run `make setup` again."
        )
    if "://" not in source and not Path(source).expanduser().exists():
        raise UserError(f"{variable}={source}: no such directory (a git repository or checkout of {what})")
    say(f"  fetching {what} {commit[:12]} from {source}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _git(["init", "-q"], staging)
        fetched = subprocess.run(
            ["git", "-C", str(staging), "fetch", "-q", "--depth", "1", source, commit], check=False
        )
        if fetched.returncode != 0:
            say("  the source refused a fetch by commit; fetching its whole history instead")
            _git(["fetch", "-q", source, "+refs/heads/*:refs/remotes/source/*"], staging)
        _git(["-c", "advice.detachedHead=false", "checkout", "-q", commit], staging)
        _git(["remote", "add", "origin", source], staging)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def _git(args: list[str], cwd: Path) -> None:
    argv = ["git", "-C", str(cwd), *args]
    if subprocess.run(argv, check=False).returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed (output above)")
