"""The package's layering: data flows one way (snapshot files and changesets -> loader -> store (+
search index) -> handlers -> bytes), so no module imports one of a floor above its own. The
transport (``http/``) knows no domain; the domain (snapshot, store, search, edge, replica, source, api)
knows nothing of serving (``serve/``). Imports made only for type checking are left out: they
cost nothing at run time and make no cycle."""

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "docsrv"
#: Lowest first. A module's floor is that of the longest prefix listed.
LAYERS = [
    ["docsrv.errors", "docsrv.utils", "docsrv.observe.logs"],
    ["docsrv.config"],
    # transport
    ["docsrv.http"],
    # domain
    ["docsrv.snapshot"],
    ["docsrv.store"],
    ["docsrv.search"],
    ["docsrv.edge", "docsrv.observe"],
    ["docsrv.replica"],
    ["docsrv.source"],
    ["docsrv.api"],
    # serving
    ["docsrv.serve"],
    ["docsrv.serve.supervisors"],
    ["docsrv.cli", "docsrv.__main__"],
]
TRANSPORT, DOMAIN, SERVING = (["docsrv.http"], ["docsrv.snapshot", "docsrv.store", "docsrv.search", "docsrv.replica", "docsrv.source"],
                               ["docsrv.serve"])
#: At most this many modules stand in docsrv/ itself: the entry points and what every wing shares.
TOP_MODULES = 8


def layer_of(module: str) -> int:
    if module == "docsrv":  # the package itself: its version, nothing else
        return 0
    best, level = "", None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, level = prefix, index
    assert level is not None, f"{module} is in no layer: add it to LAYERS"
    return level


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, *, type_only: bool = False, source: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every import of a docsrv module that runs (not under TYPE_CHECKING),
    and with ``type_only`` those made for type checking too; of ``source`` in place of the file's
    text, when given."""
    tree = ast.parse(path.read_text() if source is None else source)
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and not type_only:
            skipped |= {id(child) for child in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            targets = [target] + [f"{target}.{alias.name}" for alias in node.names]
            for candidate in targets:
                if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists() or (
                    PACKAGE.parent / candidate.replace(".", "/") / "__init__.py"
                ).exists():
                    found.append((node.lineno, candidate))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("docsrv")]
    return [(line, module) for line, module in found if module.startswith("docsrv")]


def test_no_module_imports_one_above_its_layer():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    assert [wrong for path in modules for wrong in violations(path)] == []


def violations(path: Path, source: str | None = None) -> list[str]:
    own = layer_of(module_name(path))
    return [f"{path.relative_to(ROOT)}:{line} imports {imported}" for line, imported in runtime_imports(path, source=source)
            if imported != "docsrv" and layer_of(imported) > own]


def test_the_floors_stand_transport_below_domain_below_serving():
    floors = [[layer_of(prefix) for prefix in group] for group in (TRANSPORT, DOMAIN, SERVING)]
    assert max(floors[0]) < min(floors[1]) and max(floors[1]) < min(floors[2])
    assert layer_of("docsrv.api.app") < layer_of("docsrv.serve.worker") < layer_of("docsrv.serve.supervisors.master")


@pytest.mark.parametrize(("path", "line"), [
    (PACKAGE / "http" / "reply.py", "from ..store.loaded import Store"),  # the transport knows no store
    (PACKAGE / "http" / "reply_cache.py", "from ..snapshot.records import Project"),  # nor the records
    (PACKAGE / "http" / "hits.py", "from ..store.changes import Applied"),  # nor a store's changes
    (PACKAGE / "store" / "loaded.py", "from ..serve.served import Served"),  # the domain knows nothing of serving
    (PACKAGE / "search" / "query.py", "from ..serve.following import Follower"),
    (PACKAGE / "replica" / "pull.py", "from ..api.state import ApiState"),  # nor of the handlers above it
])
def test_an_import_against_the_floors_is_caught(path, line):
    """The test above fails on such an import: each added to the real module is one violation."""
    assert violations(path) == []
    assert len(violations(path, path.read_text() + "\n" + line + "\n")) == 1


def test_the_transport_imports_no_domain_even_for_types():
    """Nothing under http/ imports the store, its changes or the snapshot records, not even for
    type checking: the purge keys, which are domain knowledge, live in edge/keys.py."""
    domain = [f"{path.relative_to(ROOT)} imports {imported}" for path in (PACKAGE / "http").rglob("*.py")
              for _line, imported in runtime_imports(path, type_only=True)
              if any(imported == prefix or imported.startswith(prefix + ".") for prefix in DOMAIN)]
    assert domain == []


def test_the_package_itself_keeps_only_what_every_wing_shares():
    assert len(list(PACKAGE.glob("*.py"))) <= TOP_MODULES


def test_no_import_cycle_not_even_for_types():
    """Modules import each other one way only, type-only imports included (issue 24: reply.py and
    reply_cache.py imported each other for types)."""
    graph = {module_name(path): {m for _line, m in runtime_imports(path, type_only=True)} for path in PACKAGE.rglob("*.py")}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            if imported in trail:
                cycles.append(" -> ".join([*trail[trail.index(imported):], imported]))
            elif imported not in done:
                visit(imported, [*trail, imported])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert cycles == []
