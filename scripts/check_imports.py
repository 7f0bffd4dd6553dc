"""List the import circles of a package: strongly connected groups of its modules, counting
every import statement (module level and inside functions, ``from x import y`` as an import of
``x.y`` when that is a module, else of ``x``). Exit status 1 when there is one.

    python scripts/check_imports.py [ivln_ce]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components


def module_names(package: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = f.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (its own parent packages excluded)."""
    known = module_names(package)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, f in known.items():
        here = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                dep = _resolve(t, known)
                if dep and dep != mod and not mod.startswith(dep + "."):
                    graph[mod].add(dep)
    return graph


def import_circles(package: Path) -> list[list[str]]:
    graph = import_graph(package)
    names = sorted(graph)
    index = {n: i for i, n in enumerate(names)}
    rows = [index[a] for a, deps in graph.items() for _ in deps]
    cols = [index[b] for deps in graph.values() for b in deps]
    matrix = csr_matrix(([1] * len(rows), (rows, cols)), shape=(len(names), len(names)))
    count, labels = connected_components(matrix, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for n, label in zip(names, labels):
        groups.setdefault(int(label), []).append(n)
    return sorted(g for g in groups.values() if len(g) > 1)


def main(argv: list[str]) -> int:
    package = Path(argv[0] if argv else Path(__file__).resolve().parents[1] / "ivln_ce")
    circles = import_circles(package)
    for group in circles:
        print("import circle: " + " <-> ".join(group))
    print(f"{len(circles)} import circle(s) in {package}")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
