"""The package's import graph: no circle, layers that only look down, small modules.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts,
at module level or inside a function, except those under ``if TYPE_CHECKING:``,
which never run.  An import inside a function that closed a circle would only hide
it, so it counts as much as one at the top.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hami_devices"
MAX_LINES = 400

# Layers, lowest first: a module may import only its own layer and those below.
LAYERS: list[tuple[str, ...]] = [
    (  # 1. models, units, errors, configuration, the rule table and its evaluator
        "hami_devices.errors", "hami_devices.models", "hami_devices.config", "hami_devices.yamlfile",
        "hami_devices.extras", "hami_devices.traits", "hami_devices.accounting", "hami_devices.rounding",
        "hami_devices.rules", "hami_devices.plugins", "hami_devices.inventory", "hami_devices.workload",
        "hami_devices.ledger", "hami_devices.limiter", "hami_devices.node_identity", "hami_devices.nodeconfig",
        "hami_devices.inputs", "hami_devices.inventory_schema",
    ),
    (  # 2. vendor adapters and devices
        "hami_devices.isolation", "hami_devices.holdings", "hami_devices.monitoring", "hami_devices.device",
        "hami_devices.simulated",
        "hami_devices.adapter", "hami_devices.registry", "hami_devices.discovery", "hami_devices.sizing",
    ),
    ("hami_devices.scheduling",),  # 3. cluster state and the engine
    (  # 4. allocation, release, ledgers
        "hami_devices.assembly", "hami_devices.device_sets", "hami_devices.allocation", "hami_devices.releasing",
        "hami_devices.lifecycle", "hami_devices.engine_config", "hami_devices.committing",
        "hami_devices.handoff",
    ),
    ("hami_devices",),  # the package facade: the public names of the layers above, for everything below
    (  # 5. consumers
        "hami_devices.queueing", "hami_devices.simulate", "hami_devices.observability", "hami_devices.kubernetes",
        "hami_devices.integrations", "hami_devices.testing",
    ),
    ("hami_devices.cli", "hami_devices.doctor"),  # 6. the command line
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
EXTENSIONS = {"hami_devices._native", "hami_devices._fgd"}  # compiled by cffi from native/: leaves


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _resolve(name: str) -> str | None:
    if name in EXTENSIONS:
        return None
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import of ``module`` that can run."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` imports the submodule when there is one, else a name of pkg
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES.keys() | EXTENSIONS else base for a in node.names
            ]
        else:
            continue
        for name in names:
            if name.split(".")[0] != "hami_devices":
                continue
            target = _resolve(name)
            if target is not None and target != module:
                yield target, node.lineno


GRAPH: dict[str, set[str]] = defaultdict(set)
for _module in MODULES:
    for _target, _ in imports_of(_module):
        GRAPH[_module].add(_target)


def strongly_connected() -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(component)

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def layer_of(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    return level


def test_no_import_circle() -> None:
    circles = [sorted(c) for c in strongly_connected() if len(c) > 1]
    assert circles == []


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if layer_of(m) < 0] == []


def test_layers_only_look_down() -> None:
    upward = [
        f"{module} (layer {layer_of(module) + 1}) imports {target} (layer {layer_of(target) + 1})"
        for module in sorted(MODULES)
        for target in sorted(GRAPH[module])
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("hami_devices.scheduling", ("hami_devices.discovery", "hami_devices.registry", "hami_devices.config")),
        ("hami_devices.device", ("hami_devices.allocation",)),
        ("hami_devices.cli", ("hami_conformance",)),
        ("hami_devices.doctor", ("hami_conformance",)),
        ("hami_devices.integrations", ("hami_devices.cli",)),
    ],
)
def test_named_boundaries(module: str, forbidden: tuple[str, ...]) -> None:
    """Scheduling never reads files or plugins; a device never reaches the allocator; the CLI and doctor reach
    the conformance suite only through its entry point; integrations never go through the CLI."""
    found = []
    for name, path in MODULES.items():
        if name != module and not name.startswith(module + "."):
            continue
        tree = ast.parse(path.read_text())
        skipped = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{name}:{node.lineno} {n}" for n in names if any(n.startswith(f) for f in forbidden)]
    assert found == []


def test_modules_are_small() -> None:
    large = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert large == {}
