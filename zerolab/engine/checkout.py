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
            why = "`git fetch` failed, output above; no network access to it?"
            try:
                _git(["fetch", "-q", source, "+refs/heads/*:refs/remotes/source/*"], staging)
                why = "it holds no such commit"
                _git(["cat-file", "-e", f"{commit}^{{commit}}"], staging)
            except UserError:
                raise UserError(fetch_failed(source, commit, what=what, variable=variable, why=why)) from None
        _git(["-c", "advice.detachedHead=false", "checkout", "-q", commit], staging)
        _git(["remote", "add", "origin", source], staging)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def fetch_failed(source: str, commit: str, *, what: str, variable: str, why: str) -> str:
    """The error of a fetch of `commit` from `source` that failed, with the way round: from
    upstream (no network access to it?), a local copy named by `variable`; from the local copy
    `variable` names, one that holds the commit."""
    holding = f"a local clone or bare repository of {what} holding commit {commit}"
    if "://" not in source and Path(source).expanduser().exists():
        return (
            f"{variable}={source}: fetching {what} {commit} from it failed ({why}): {variable} must name "
            f"{holding} (`git -C {source} cat-file -e {commit}^{{commit}}` says whether it does); fetch "
            f"that commit into it, or point {variable} at another copy, and run the command again"
        )
    return (
        f"fetching {what} {commit} from {source} failed ({why}). Without network access to it, set "
        f"{variable} to {holding} (`git clone --bare {source}` where the network reaches it, then copy "
        f"it here) and run the command again, e.g. `{variable}=/path/to/{what}.git make demo` (or make setup)"
    )


def _git(args: list[str], cwd: Path) -> None:
    argv = ["git", "-C", str(cwd), *args]
    if subprocess.run(argv, check=False).returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed, output above")
