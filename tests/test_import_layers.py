"""The package layering of docs/architecture.md: each package imports only lower layers.

The plan types live in the leaf :mod:`hetplan.planspec`, so that the prediction does not import
the planner (the planner's search imports the prediction, never the other way round). Checked
twice: statically over every import statement (also those inside functions), and by importing
in a fresh interpreter (what ``sys.modules`` holds afterwards).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "hetplan"

LAYERS: dict[str, int] = {
    "errors": 0,
    "units": 0,
    "serde": 1,  # JSON round-trip of the input dataclasses
    "planspec": 1,  # the plan specification: a leaf, imports nothing of hetplan
    "cluster": 2,
    "graph": 2,
    "cost": 3,  # pure cost functions over numbers
    "profile": 4,  # measured costs
    "schedule": 4,
    "simulate": 5,
    "predict": 6,
    "plan": 7,  # the search simulates its shortlist with predict
    "run": 8,
    "report": 8,
    "bench": 9,
    "usecases": 10,  # the commands' flows: typed inputs, typed results, nothing printed
    "cli": 11,
    "__main__": 12,
}
"""A package may import its own modules and those of strictly lower layers."""


def _package(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """Every hetplan package ``path`` imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        out.update(n.split(".")[1] for n in names if n.startswith("hetplan."))
    return out


def test_every_package_has_a_layer() -> None:
    packages = {_package(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert packages <= set(LAYERS), sorted(packages - set(LAYERS))


def test_packages_import_only_lower_layers() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        pkg = _package(path)
        if pkg == "__init__":
            continue
        for dep in _imports(path):
            if dep != pkg and LAYERS[dep] >= LAYERS[pkg]:
                bad.append(f"{path.relative_to(SRC)} ({pkg}, layer {LAYERS[pkg]}) imports {dep}")
    assert not bad, "\n".join(bad)


def _loaded(module: str) -> set[str]:
    """Modules in ``sys.modules`` after importing ``module`` in a fresh interpreter."""
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(done.stdout.split())


def _under(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules for p in packages if m == p or m.startswith(p + "."))


def test_predict_imports_neither_the_planner_nor_torch() -> None:
    # The plan types come from hetplan.planspec; predict prices a traced graph, so it needs
    # numpy but not torch (tracing is hetplan.graph's).
    loaded = _loaded("hetplan.predict")
    assert not _under(loaded, "hetplan.plan", "hetplan.run", "hetplan.cli", "torch")
    assert "hetplan.planspec" in loaded


def test_planning_flows_import_no_torch() -> None:
    # plan and predict read power fits from hetplan.profile.power_store, not from the runtime:
    # only tracing the model (hetplan.graph, on first use) loads torch.
    loaded = _loaded("hetplan.usecases.plan, hetplan.usecases.predict")
    assert not _under(loaded, "torch", "hetplan.run", "hetplan.cli", "hetplan.graph.extract")
    assert "hetplan.profile.power_store" in loaded


def test_power_store_imports_no_torch() -> None:
    loaded = _loaded("hetplan.profile.power_store")
    assert not _under(loaded, "torch", "hetplan.run", "hetplan.planspec.torch_dtypes")


def test_planspec_is_a_leaf() -> None:
    loaded = _loaded("hetplan.planspec")
    others = set(_under(loaded, "hetplan")) - {"hetplan", *_under(loaded, "hetplan.planspec")}
    assert not others, sorted(others)
    # Light commands read plans and dtypes: no torch (planspec.torch_dtypes is not imported).
    assert not _under(loaded, "torch", "numpy", "hetplan.planspec.torch_dtypes")


def test_cost_models_import_no_plan_or_schedule() -> None:
    modules = sorted(f"hetplan.cost.{p.stem}" for p in (SRC / "cost").glob("*.py"))
    loaded = _loaded(", ".join(modules))
    assert not _under(
        loaded, "hetplan.plan", "hetplan.predict", "hetplan.schedule", "hetplan.simulate"
    )


RUN_WINGS: dict[str, int] = {
    "setup": 0,  # what a rank holds: layout, layers, TP shards, data, precision, checkpoints
    "launch": 1,  # starting ranks: generic over the job, knows nothing of training
    "execute": 1,  # running a rank's actions
    "meters": 1,  # what a rank reads while it runs
    "loop": 2,  # a rank's training loop: set-up, executor, meters, steps
    "measurement": 3,  # what the ranks' results say
    "references": 3,  # one-process runs the distributed ones are checked against
    "train": 4,  # `hetplan train`'s run: launch, collect, measure
    "tune": 5,  # trials chained through train
}
"""``hetplan.run`` in wings: a wing imports its own modules and those of lower wings."""


def _run_wing(path: Path) -> str | None:
    parts = path.relative_to(SRC).parts
    return parts[1].removesuffix(".py") if parts[0] == "run" and len(parts) > 1 else None


def _run_imports(path: Path) -> set[str]:
    """The wings of ``hetplan.run`` that ``path`` imports (``hetplan.run.<wing>...``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out.update(n.split(".")[2] for n in names if n.startswith("hetplan.run.") and n.count("."))
    return out


def test_run_wings_import_only_lower_wings() -> None:
    bad = []
    for path in sorted((SRC / "run").rglob("*.py")):
        wing = _run_wing(path)
        if wing is None or wing == "__init__":
            continue
        assert wing in RUN_WINGS, f"{path.relative_to(SRC)}: wing {wing} has no rank in RUN_WINGS"
        for dep in _run_imports(path) - {wing}:
            if RUN_WINGS[dep] >= RUN_WINGS[wing]:
                bad.append(f"{path.relative_to(SRC)} ({wing}) imports run.{dep}")
    assert not bad, "\n".join(bad)


def test_every_run_wing_says_what_it_is_for() -> None:
    """Each wing is a sub-package whose docstring says its purpose in one sentence."""
    for wing in (w for w in RUN_WINGS if (SRC / "run" / w).is_dir()):
        doc = ast.get_docstring(ast.parse((SRC / "run" / wing / "__init__.py").read_text()))
        assert doc and doc.count(". ") == 0 and doc.endswith("."), (wing, doc)
