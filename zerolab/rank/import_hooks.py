"""How zerolab changes the pinned engine without editing its files: import hooks on `sys.meta_path`
that patch an engine module right after it is imported, or stand in for one that is missing, and
the `LaunchPatch` record each change is named, explained and applied by. Standard library only:
this runs in every rank before the training script imports anything of the engine."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any


def always() -> bool:
    """Wanted by every launch."""
    return True


@dataclass(frozen=True)
class LaunchPatch:
    """One named change applied at launch: `why` is the one-line explanation printed at the top of
    train.log as `zerolab: KIND NAME: WHY`; `wanted` says whether this launch applies it (an opt-in
    patch reads its environment variable)."""

    name: str
    why: str
    apply: Callable[[], None]
    wanted: Callable[[], bool] = always
    kind: str = "workaround"


def launch_patch(apply: Callable[[], None], wanted: Callable[[], bool] = always, kind: str = "workaround"):
    """The LaunchPatch of function `apply`: named after it, explained by its docstring."""
    return LaunchPatch(apply.__name__, (apply.__doc__ or "").strip(), apply, wanted, kind)


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides module `fullname` from `build(module)` instead of (or in the absence of) its file."""

    def __init__(self, fullname: str, build: Callable[[types.ModuleType], None]) -> None:
        self.fullname = fullname
        self.build = build

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"zerolab workaround for {fullname}")

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        self.build(module)


class _ModuleHook(importlib.abc.MetaPathFinder):
    """Executes module `fullname` with its own loader inside each context manager of `arounds`
    (opened in order), then runs each patch of `patches`, in order."""

    def __init__(self, fullname: str) -> None:
        self.fullname = fullname
        self.arounds: list[Callable[[], AbstractContextManager[Any]]] = []
        self.patches: list[Callable[[types.ModuleType], None]] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        original_exec = spec.loader.exec_module
        arounds, patches = self.arounds, self.patches

        def exec_module(module: types.ModuleType) -> None:
            with contextlib.ExitStack() as stack:
                for around in arounds:
                    stack.enter_context(around())
                original_exec(module)
            for patch in patches:
                patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _hook_of(fullname: str) -> _ModuleHook:
    """The one hook of module `fullname` on sys.meta_path, installed first where there is none."""
    hook = next((f for f in sys.meta_path if isinstance(f, _ModuleHook) and f.fullname == fullname), None)
    if hook is None:
        hook = _ModuleHook(fullname)
        sys.meta_path.insert(0, hook)
    return hook


def patch_after_import(fullname: str, patch: Callable[[types.ModuleType], None]) -> None:
    """Have `patch(module)` run once module `fullname` is imported (one hook per module); at once
    where it is imported already."""
    if fullname in sys.modules:
        patch(sys.modules[fullname])
        return
    _hook_of(fullname).patches.append(patch)


def import_inside(fullname: str, around: Callable[[], AbstractContextManager[Any]]) -> None:
    """Have module `fullname` executed inside the context manager `around()` when it is imported
    (nothing where it is imported already)."""
    if fullname not in sys.modules:
        _hook_of(fullname).arounds.append(around)


def apply_wanted(patches: Sequence[LaunchPatch]) -> list[LaunchPatch]:
    """Install the import hook of every patch this launch wants; returns them in the order applied.
    Raises ValueError for a malformed opt-in environment variable."""
    wanted = [patch for patch in patches if patch.wanted()]
    for patch in wanted:
        patch.apply()
    return wanted
