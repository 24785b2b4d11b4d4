"""The house's layering, checked on the source: every import points down, and no module imports itself back.

Layers, top to bottom (STYLE.md "Layering"): the project shell ``streamforge_web``; the apps ``dlq`` above
``pipelines`` with ``notifications`` above both; the ground floor ``access`` (people, roles, the audit chain); the Django-free core
``streamforge_core``. Tooling beside the shell (``demo``, ``chaos``, ``bench``, ``devstack``) may use
anything; the product never imports tooling or tests. The Spark driver (``pipelines.spark``, and the DSL and
spec it runs) imports nothing from Django, directly or through anything it imports.

Every ``import`` statement counts, also those inside functions: a lazy import that breaks a cycle at start-up
is still a cycle in the design.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Product packages by layer: a module may import its own package and any package of a lower rank.
RANKS = {
    "streamforge_core": 0,
    "access": 1,
    "pipelines": 2,
    "dlq": 3,
    "notifications": 4,
    "streamforge_web": 5,
}
TOOLING = {"demo", "chaos", "bench", "devstack", "tests"}
#: The driver's Django-free world: these modules and everything they import.
DRIVER_ROOTS = (
    "pipelines.spark.driver",
    "pipelines.spark.fence",
    "pipelines.spark.writer",
    "pipelines.dsl.spark",
    "pipelines.spec",
)

Graph = dict[str, set[str]]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_graph(packages: Iterable[str]) -> tuple[Graph, set[str]]:
    """{module: modules it imports} for every ``.py`` file of ``packages`` (dotted names, imports of any
    module, ours or not), and the set of our own module names. ``from package import name`` counts as an
    import of ``package.name`` when that is one of our modules, else of ``package``."""
    files = [path for package in packages for path in sorted((ROOT / package).rglob("*.py"))]
    ours = {_module_name(path) for path in files}
    graph: Graph = {}
    for path in files:
        importer = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(importer, path.name == "__init__.py", node)
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    targets.add(submodule if submodule in ours else module)
        targets.discard(importer)
        graph[importer] = targets
    return graph, ours


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each
    sorted: every one is a set of modules that import each other, directly or around a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a higher layer, or of tooling, by a product module."""
    wrong = []
    for importer, targets in sorted(graph.items()):
        rank = RANKS.get(_top(importer))
        if rank is None:
            continue
        for target in sorted(targets):
            top = _top(target)
            if top in TOOLING or RANKS.get(top, -1) > rank:
                wrong.append(f"{importer} -> {target}")
    return wrong


PRODUCT, OURS = import_graph(RANKS)


def test_the_cycle_finder_finds_a_planted_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d", "django.db"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_layer_check_names_an_upward_import():
    graph = {"pipelines.views": {"dlq.models", "access.models"}, "access.audit": {"streamforge_core.kafka"}}
    assert upward_imports(graph) == ["pipelines.views -> dlq.models"]


def test_every_product_import_points_down():
    assert upward_imports(PRODUCT) == []


def test_no_product_modules_import_each_other_in_a_cycle():
    assert cycles(PRODUCT) == []


def test_the_core_imports_neither_django_nor_spark():
    imported = {
        target
        for module, targets in PRODUCT.items()
        if _top(module) == "streamforge_core"
        for target in targets
    }
    assert not {
        t for t in imported if _top(t) in {"django", "rest_framework", "pyspark", "channels", "celery"}
    }


@pytest.mark.parametrize("root", DRIVER_ROOTS)
def test_the_spark_driver_reaches_no_django_module(root):
    seen: set[str] = set()
    todo = [root]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(target for target in PRODUCT.get(module, ()) if target in OURS)
    django = sorted(
        f"{module} -> {target}"
        for module in seen
        for target in PRODUCT.get(module, ())
        if _top(target) in {"django", "rest_framework", "channels", "celery"}
    )
    assert django == []
