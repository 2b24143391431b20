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
        "hami_devices.lazy_names",  # the facades' and moved modules' __getattr__ (standard library only)
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
        "hami_devices.handoff", "hami_devices.following",
    ),
    ("hami_devices",),  # the package facade: the public names of the layers above, for everything below
    (  # 5. consumers
        "hami_devices.queueing", "hami_devices.simulate", "hami_devices.observability", "hami_devices.kubernetes",
        "hami_devices.integrations", "hami_devices.testing",
        "hami_devices.research",  # placement research: nothing below imports it at import time (test below)
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
TREES = {m: ast.parse(p.read_text()) for m, p in MODULES.items()}  # parsed once, read by every check


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
    tree = TREES[module]
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
    for name in MODULES:
        if name != module and not name.startswith(module + "."):
            continue
        tree = TREES[name]
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


# ---------------------------------------------------------------------- the size of a class's interface
MAX_PUBLIC_METHODS = 20

# Classes over the cap when the check came in (issue 41: compose instead of inherit), each with its count
# then, as a ceiling: a class may shed methods, never gain one, and its entry goes once it is at or under
# the cap -- so this list can only shrink.
OVER_THE_CAP: dict[str, int] = {
    "hami_devices.scheduling.cluster.ClusterState": 59,  # issue 41 item 1: to own its tables as fields
    "hami_devices.scheduling.plans.Plans": 41,  # issue 41 item 1: a base of ClusterState
    "hami_devices.scheduling.tables.Tables": 34,  # issue 41 item 1: a base of ClusterState
    "hami_devices.scheduling.engine.Engine": 29,  # issue 41
}

ClassKey = tuple[str, str]  # (module, class name)


def _imported_names(module: str, tree: ast.Module, path: Path) -> dict[str, ClassKey]:
    """Local name -> (module, name) for every ``from X import Y [as Z]`` of the module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, ClassKey] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                out[alias.asname or alias.name] = (base, alias.name)
    return out


def class_interfaces(sources: dict[str, tuple[Path, ast.Module]]) -> dict[ClassKey, set[str]]:
    """Per top-level class of ``sources`` (module -> (path, parsed source)): the public methods it offers, its own and
    those it inherits from classes of the same sources (a base elsewhere, e.g. pydantic's, adds none).

    A public method is a ``def`` whose name does not start with ``_`` (properties too: they are interface)."""
    own: dict[ClassKey, set[str]] = {}
    bases: dict[ClassKey, list[str]] = {}
    imported: dict[str, dict[str, ClassKey]] = {}
    for module, (path, tree) in sources.items():
        imported[module] = _imported_names(module, tree, path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                key = (module, node.name)
                own[key] = {
                    f.name
                    for f in node.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not f.name.startswith("_")
                }
                bases[key] = [b.id for b in node.bases if isinstance(b, ast.Name)]

    def resolve(module: str, name: str, depth: int = 0) -> ClassKey | None:
        if (module, name) in own:
            return module, name
        source = imported.get(module, {}).get(name)
        if source is None or depth > 10:  # re-exported through a package's __init__ at most a few times
            return None
        return resolve(*source, depth + 1)

    def interface(key: ClassKey, seen: frozenset[ClassKey]) -> set[str]:
        out = set(own[key])
        for base in bases[key]:
            found = resolve(key[0], base)
            if found is not None and found not in seen:
                out |= interface(found, seen | {key})
        return out

    return {key: interface(key, frozenset()) for key in own}


def test_the_interface_count_sees_inherited_methods() -> None:
    """A base in another module, imported under another name, adds its public methods (not its private ones)."""
    sources = {
        "pkg.base": (Path("pkg/base.py"), "class Base:\n    def a(self): ...\n    def _hidden(self): ...\n"),
        "pkg.mid": (
            Path("pkg/mid.py"),
            "from pkg.base import Base as B\nclass Mid(B):\n    @property\n    def b(self): ...\n",
        ),
        "pkg": (Path("pkg/__init__.py"), "from pkg.mid import Mid\n"),
        "pkg.top": (
            Path("pkg/top.py"),
            "from pkg import Mid\nfrom enum import Enum\n"
            "class Top(Mid, Enum):\n    def c(self): ...\n    def a(self): ...\n",
        ),
    }
    found = class_interfaces({m: (path, ast.parse(text)) for m, (path, text) in sources.items()})
    assert found[("pkg.base", "Base")] == {"a"}
    assert found[("pkg.mid", "Mid")] == {"a", "b"}
    assert found[("pkg.top", "Top")] == {"a", "b", "c"}


INTERFACES = {f"{m}.{c}": n for (m, c), n in class_interfaces({m: (p, TREES[m]) for m, p in MODULES.items()}).items()}


def test_classes_offer_few_public_methods() -> None:
    """A class offers at most MAX_PUBLIC_METHODS (inherited ones count: a base is no way around the cap)."""
    large = {
        name: len(methods)
        for name, methods in INTERFACES.items()
        if len(methods) > max(MAX_PUBLIC_METHODS, OVER_THE_CAP.get(name, 0))
    }
    assert large == {}, "compose: give the class parts (fields) with methods of their own"


def test_the_allowance_for_large_classes_only_shrinks() -> None:
    """An entry of OVER_THE_CAP whose class is gone or now within the cap is to be removed."""
    stale = [
        name for name in OVER_THE_CAP if name not in INTERFACES or len(INTERFACES[name]) <= MAX_PUBLIC_METHODS
    ]
    assert stale == []


# ---------------------------------------------------------------------- research apart (issue 41 item 4)
RESEARCH = "hami_devices.research"


def import_time_imports(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(module named, line) for each import that runs when the module is imported: at module level or in a class
    body, not inside a function (which runs only when called) nor under ``if TYPE_CHECKING:``."""
    skipped = _type_checking_nodes(tree)
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if id(node) in skipped or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield from ((f"{node.module}.{a.name}", node.lineno) for a in node.names if node.module)
        else:
            pending.extend(ast.iter_child_nodes(node))


def test_import_time_imports_leave_function_bodies_out() -> None:
    tree = ast.parse(
        "import a.b\nfrom c import d\nif TYPE_CHECKING:\n    import e\n"
        "def f():\n    import g\nclass K:\n    import h\ntry:\n    import i\nexcept ImportError:\n    pass\n"
    )
    assert sorted(name for name, _ in import_time_imports(tree)) == ["a.b", "c.d", "h", "i"]


def test_the_core_never_imports_research_at_import_time() -> None:
    """The core runs without the research extra: no module outside hami_devices.research imports it when loaded
    (a deprecated old path forwards to it only when one of its names is asked for)."""
    found = [
        f"{module}:{line} {name}"
        for module in sorted(MODULES)
        if module != RESEARCH and not module.startswith(RESEARCH + ".")
        for name, line in import_time_imports(TREES[module])
        if name == RESEARCH or name.startswith(RESEARCH + ".")
    ]
    assert found == []
