"""The import graph of ``qworker`` and ``trainer``: no circles, and the trainer uses qworker's public modules only.

Pure: every module is parsed with ``ast``, none imported.  Every import counts, at module level,
inside functions and under ``TYPE_CHECKING``: a module a function imports is a module it depends on.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("qworker", "trainer")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is_package) for every module of ``PACKAGES``."""
    out = {}
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            out[".".join(parts)] = (path, is_package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ``PACKAGES`` it imports (a ``from pkg import mod`` names the module ``pkg.mod``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as ``[a, b, ..., a]``, or ``[]`` when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


def test_find_cycle_reports_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_module_of_qworker_or_trainer_imports_itself_in_a_circle():
    cycle = find_cycle(import_graph())
    assert not cycle, "import circle: " + " -> ".join(cycle)


def test_the_trainer_imports_only_public_qworker_modules():
    private = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items() if module.startswith("trainer")
        for target in targets if target.startswith("qworker") and any(part.startswith("_") for part in target.split("."))
    )
    assert not private, "the trainer reaches into qworker's private modules: " + "; ".join(private)


# Pairs of qworker subpackages that import each other, each with why it stays.  Remove a pair once it is gone
# (the test below says so); add one only with a reason.
TWO_WAY_PACKAGES_ALLOWED = {
    frozenset({"qworker.engine", "qworker.transport"}):
        "transport.client_wire carries the engine's public Result (a msgspec struct) to a service's clients; it goes "
        "when Result moves below both (a module of its own), a move that touches every importer of qworker.Result",
    frozenset({"qworker.integrations", "qworker.service"}):
        "service.http is the OpenRLHF-compatible HTTP front and reuses the integrations' payload and outcome adapters "
        "(integrations._payload, _outcome), while integrations._client builds on service.Client; it goes when those "
        "adapters move to a package of their own below both",
}


def package_of(module: str, packages: set[str]) -> str | None:
    """The innermost subpackage of qworker that ``module`` is in (a package is in itself); None for the root's modules."""
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        name = ".".join(parts[:n])
        if name in packages:
            return name
    return None


def two_way_packages(graph: dict[str, set[str]], packages: set[str]) -> dict[frozenset[str], list[str]]:
    """Each pair of subpackages that import each other -> the module imports that make it, both ways."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        a = package_of(module, packages)
        for target in targets:
            b = package_of(target, packages)
            if a is not None and b is not None and a != b:
                edges.setdefault((a, b), []).append(f"{module} -> {target}")
    return {frozenset({a, b}): sorted(why + edges[(b, a)]) for (a, b), why in edges.items() if (b, a) in edges and a < b}


def _qworker_packages() -> set[str]:
    return {name for name, (_, is_package) in _modules().items() if is_package and name.startswith("qworker.")}


def test_two_way_packages_finds_packages_that_import_each_other_at_any_depth():
    graph = {"qworker.a.x": {"qworker.b.y"}, "qworker.b.y": {"qworker.a"}, "qworker.a": set(), "qworker.a.c.z": {"qworker.a.x"},
             "qworker.a.x2": {"qworker.a.c.z"}, "qworker.d": {"qworker._errors"}, "qworker._errors": {"qworker.d"}}
    pairs = two_way_packages(graph, {"qworker.a", "qworker.b", "qworker.a.c", "qworker.d"})
    assert pairs == {frozenset({"qworker.a", "qworker.b"}): ["qworker.a.x -> qworker.b.y", "qworker.b.y -> qworker.a"],
                     frozenset({"qworker.a", "qworker.a.c"}): ["qworker.a.c.z -> qworker.a.x", "qworker.a.x2 -> qworker.a.c.z"]}


def test_no_two_qworker_subpackages_import_each_other_but_the_pairs_allowed_with_a_reason():
    pairs = two_way_packages(import_graph(), _qworker_packages())
    new = {pair: why for pair, why in pairs.items() if pair not in TWO_WAY_PACKAGES_ALLOWED}
    assert not new, "subpackages that import each other (move the shared name to the lower one): " + "; ".join(
        f"{' <-> '.join(sorted(pair))}: {', '.join(why)}" for pair, why in new.items())
    gone = [" <-> ".join(sorted(pair)) for pair in TWO_WAY_PACKAGES_ALLOWED if pair not in pairs]
    assert not gone, f"no longer two-way: remove from TWO_WAY_PACKAGES_ALLOWED: {', '.join(gone)}"
