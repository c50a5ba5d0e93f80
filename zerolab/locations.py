"""Where things are: the zerolab checkout this package runs from, its recipes and building
blocks. Paths in recipes are relative to the repository root."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The zerolab checkout this package runs from."""
CHECKOUT: Path | None = REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else None
"""The repository this package runs from, or None for an installed package."""
CONFIGS_DIR = REPO_ROOT / "configs"
RECIPES_DIR = REPO_ROOT / "recipes"


def repo_path(path: str) -> Path:
    """A recipe path (relative to the repository root, or absolute) as an absolute path."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else REPO_ROOT / candidate


def display_path(path: Path) -> str:
    """`path` relative to the repository root when it is inside it, for messages."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
