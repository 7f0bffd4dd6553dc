"""The package reads top-down: no import circle between its modules (function-level imports
count too), checked by ``scripts/check_imports.py``."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_imports", REPO / "scripts" / "check_imports.py")
check_imports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_imports)


def test_the_checker_finds_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from pkg import a\n")  # imports into the circle, not part of it
    assert check_imports.import_circles(pkg) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_ivln_ce_has_no_import_circle():
    assert check_imports.import_circles(REPO / "ivln_ce") == []


def test_every_source_folder_is_a_package_that_an_install_ships():
    """setuptools' package discovery skips folders without ``__init__.py``: a wheel then lacks
    them (rollout/ and mapping/ were missing from non-editable installs)."""
    from setuptools import find_packages

    shipped = set(find_packages(str(REPO), include=["ivln_ce*"]))
    folders = {".".join(p.relative_to(REPO).parts) for p in (REPO / "ivln_ce").rglob("*")
               if p.is_dir() and any(p.glob("*.py")) and "__pycache__" not in p.parts}
    assert folders - shipped == set()
