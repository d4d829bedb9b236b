"""The repository's layout rules, read from the source: the engines (`nqm`, `realnets`) import
nothing from the app (`ui`, streamlit, altair) or from a command line, realnets' sub-packages
import only downwards, and no build artefact is tracked by git."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# realnets' sub-packages, lowest first: each may import from itself and those before it.
LAYERS = ("workloads", "training", "sweeps", "cluster", "planning", "calibration", "validation")
SHARED = {"realnets.store"}
FACES = ("ui", "app", "streamlit", "altair", "nqm.cli", "nqm.argparser", "nqm.__main__",
         "realnets.cli", "realnets.__main__")
ENTRY_POINTS = {"cli.py", "__main__.py", "argparser.py"}
# packages that are entry points as a whole: every module in them (`python -m realnets`'s commands)
ENTRY_PACKAGES = (REPO / "realnets" / "cli",)


def imported_modules(path: Path) -> set[str]:
    """Absolute module names imported anywhere in a file (inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (the layout checks read absolute ones)"
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def engine_files():
    for package in ("nqm", "realnets"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name not in ENTRY_POINTS and not any(path.is_relative_to(p)
                                                        for p in ENTRY_PACKAGES):
                yield path


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("path", list(engine_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_engines_import_no_face(path):
    bad = sorted(n for n in imported_modules(path) for f in FACES if _is_under(n, f))
    assert not bad, f"{path.relative_to(REPO)} imports {bad}"


def test_only_the_entry_points_are_exempt():
    engines = set(engine_files())
    exempt = sorted((REPO / "realnets" / "cli").rglob("*.py"))
    assert exempt and not engines & set(exempt)
    assert REPO / "realnets" / "store.py" in engines and REPO / "nqm" / "curve.py" in engines


def test_the_face_detector_sees_a_face(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ui import charts\n    import altair as alt\n")
    assert {"ui", "ui.charts", "altair"} <= imported_modules(probe)


@pytest.mark.parametrize("layer", LAYERS)
def test_realnets_subpackages_import_downwards(layer):
    allowed = {f"realnets.{name}" for name in LAYERS[:LAYERS.index(layer) + 1]} | SHARED
    for path in sorted((REPO / "realnets" / layer).rglob("*.py")):
        for name in imported_modules(path):
            if name.startswith("realnets."):
                top = ".".join(name.split(".")[:2])
                assert top in allowed, (
                    f"{path.relative_to(REPO)} imports {name}, above layer {layer!r}")


ARTEFACTS = (".whl", ".pyc", ".egg-info", "__pycache__", ".pytest_cache", "/dist/", "/build/")


def test_no_build_artefact_is_tracked():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    tracked = ["/" + line for line in out.splitlines()]
    bad = [p for p in tracked if any(a in p for a in ARTEFACTS)]
    assert not bad, f"build artefacts tracked by git: {bad}"
