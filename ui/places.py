"""Where the app reads and writes its files, configured once by the page (no path is derived from
where a package is installed)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOME_VARIABLE = "BATCHSCOPE_HOME"


@dataclass(frozen=True)
class Places:
    """The app's folders, all absolute.

    Attributes:
      root: relative paths typed into the app are taken from here.
      sweeps: the shipped sweeps (`<root>/sweeps`).
      results: the sweeps the app runs itself (`<root>/results`, git-ignored).
      validation: validation reports (`<root>/reports/validation`).
    """

    root: Path
    sweeps: Path
    results: Path
    validation: Path

    @classmethod
    def under(cls, root) -> "Places":
        """The standard layout below `root` (a checkout of the repository)."""
        root = Path(root).expanduser().resolve()
        return cls(root=root, sweeps=root / "sweeps", results=root / "results",
                   validation=root / "reports" / "validation")

    @classmethod
    def from_environment(cls, default_root) -> "Places":
        """`under($BATCHSCOPE_HOME)` when that variable is set, else `under(default_root)`."""
        return cls.under(os.environ.get(HOME_VARIABLE) or default_root)

    def resolve(self, path) -> Path:
        """A user-typed path: '~' expanded, a relative path taken from `root`; ValueError if empty."""
        text = str(path).strip()
        if not text:
            raise ValueError("path is empty: type a directory")
        p = Path(text).expanduser()
        return p if p.is_absolute() else self.root / p
