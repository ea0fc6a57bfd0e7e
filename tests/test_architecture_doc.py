"""docs/architecture.md against the tree: one line per module, and no name that is not there.

The module list is generated from the package and each module's docstring
(``scripts/architecture_modules.py``); a module added, moved or removed without running it
fails here. Every dotted ``hetplan....`` name the page mentions must be a module of the package
or a name a module defines.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import architecture_modules as gen  # noqa: E402

DOTTED = re.compile(r"hetplan(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _module_path(parts: list[str]) -> Path | None:
    base = gen.PACKAGE.parent.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _defines(path: Path, name: str) -> bool:
    """Whether module ``path`` binds ``name`` at top level (def, class, assignment, import)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom) and any(
            (a.asname or a.name.split(".")[0]) == name for a in node.names
        ):
            return True
    return False


def _exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        path = _module_path(parts[:k])
        if path is not None:
            rest = parts[k:]
            return not rest or _defines(path, rest[0])
    return False


def test_module_list_is_generated_from_the_tree() -> None:
    text = gen.DOC.read_text()
    assert text == gen.rendered(text), (
        "docs/architecture.md's module list is out of date: run "
        "`python scripts/architecture_modules.py`"
    )


def test_every_module_has_a_summary() -> None:
    empty = [line for line in gen.module_lines() if line.rstrip().endswith(":")]
    assert not empty, empty


def test_every_dotted_name_exists() -> None:
    names = sorted(set(DOTTED.findall(gen.DOC.read_text())))
    missing = [n for n in names if not _exists(n)]
    assert not missing, f"docs/architecture.md names what is not in the package: {missing}"
