"""The import structure: layers import downward only, and no modules import in a circle.

Read from the source (every `import src...` / `from src... import`, including ones inside
functions), so the check needs no imports to succeed. Run alone with
`python3 -m pytest -q tests/test_import_layers.py`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"

# Higher imports lower; a package never imports one of the same or a higher rank.
LAYERS: dict[str, int] = {
    "evaluate": 7,  # re-evaluates a run's checkpoint through run_experiment's table
    "run_experiment": 6,  # the entry point: the table of pipelines by top-level key
    "callbacks": 6,  # LifelongAgentBench's module paths of the callback contract and trainer
    "online_training": 5, "supervised_training": 5, "offline_training": 5,  # pipelines
    "export": 5,  # a run folder's adapter, exported
    "run": 4,  # the run kernel: assembly, run folder, commit protocol, metrics, rollout
    "training": 3,  # the training core
    "agents": 2, "tasks": 2,
    "language_models": 1,
    "sandboxes": 1,  # where model code runs (bubblewrap); tasks and tools use it
    "report": 1,  # reads run folders (their layout is storage's): curves, run page
    "records": 0, "storage": 0, "maths": 0, "configuration": 0,  # leaves
    "runtime": 0,  # process-wide execution settings (deterministic kernels, the Ray cluster)
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("src."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("src.")}
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in SOURCE.rglob("*.py")}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for target in imports_of(path):
            # `from src.a.b import c` may name module src.a.b.c or an attribute of src.a.b
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                edges[name].add(target)
    return edges


def package(module: str) -> str:
    return module.split(".")[1]


def test_the_product_never_imports_the_lab_area() -> None:
    """`experiments/` holds one-study tools over the product; the product never needs them."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [])
            found += [f"{module_name(path)} -> {name}" for name in names
                      if name.split(".")[0] in ("experiments", "tests")]
    assert found == []


def test_every_package_has_a_layer() -> None:
    packages = {path.relative_to(SOURCE).parts[0].removesuffix(".py")
                for path in SOURCE.rglob("*.py") if path.relative_to(SOURCE).parts[0] != "__init__.py"}
    assert packages <= set(LAYERS), f"packages without a layer: {packages - set(LAYERS)}"


def test_layers_import_downward_only() -> None:
    upward = sorted(f"{source} -> {target}" for source, targets in graph().items()
                    for target in targets
                    if package(source) != package(target)
                    and LAYERS[package(target)] >= LAYERS[package(source)])
    assert upward == []


def test_no_import_cycles() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(set(edges) | {t for targets in edges.values() for t in targets}):
        if node not in index:
            visit(node)
    assert cycles == []
