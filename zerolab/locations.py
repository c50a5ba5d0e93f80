"""Where things are.

Every relative path a user gives (a recipe file, `data.path` and the other paths in a recipe,
`prep --out`, `launch --run-dir`, `render --out`, `summarize` paths) is relative to the
current directory, and runs start there. What zerolab ships besides its code (the recipes,
their building blocks, the dolly sample) is found inside the package, under `zerolab/shipped/`:
in a checkout these are links to the repository's top-level `recipes/`, `configs/` and
`data_prep/samples/`, in an installed wheel copies of them.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The zerolab package."""
REPO_ROOT = PACKAGE_DIR.parent
"""The directory holding the package: the repository root in a checkout."""
CHECKOUT: Path | None = REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else None
"""The repository this package runs from, or None for an installed package."""

LOGS_DIR = Path("logs")
"""Where runs go (logs/NAME/TIMESTAMP), relative to the current directory, where runs start."""
SWEEPS_DIR = LOGS_DIR / "sweeps"
"""Where sweeps go (logs/sweeps/NAME)."""

SHIPPED_DIR = PACKAGE_DIR / "shipped"
RECIPES_DIR = SHIPPED_DIR / "recipes"
"""The shipped recipes (the repository's recipes/)."""
CONFIGS_DIR = SHIPPED_DIR / "configs"
"""The shipped building blocks (the repository's configs/)."""
SAMPLES_DIR = SHIPPED_DIR / "samples"
"""The shipped data samples (the repository's data_prep/samples/)."""


def display_path(path: Path | str) -> str:
    """`path` as a user would type it here: relative to the current directory when it is
    inside it, else absolute (links resolved)."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)
