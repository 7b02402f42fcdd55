"""The package's layering: data flows one way (snapshot files -> loader -> store (+ search index)
-> handlers -> bytes), so no module imports one of a layer above its own. Imports made only for
type checking are left out: they cost nothing at run time and make no cycle."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "docsrv"
#: Lowest first. A module's layer is that of the longest prefix listed.
LAYERS = [
    ["docsrv.errors", "docsrv.logs", "docsrv.utils"],
    ["docsrv.config"],
    ["docsrv.snapshot"],
    ["docsrv.store", "docsrv.store_changes"],
    ["docsrv.changelogs", "docsrv.code_syntax", "docsrv.highlight", "docsrv.index_build", "docsrv.named_entries",
     "docsrv.search", "docsrv.shard_layout"],
    ["docsrv.serving"],
    ["docsrv.changeset_index"],
    ["docsrv.pull"],
    ["docsrv.http", "docsrv.metrics", "docsrv.process_metrics", "docsrv.runtime"],
    ["docsrv.api", "docsrv.edge", "docsrv.publish"],
    ["docsrv.following", "docsrv.server"],
    ["docsrv.supervisors"],
    ["docsrv.cli", "docsrv.__main__"],
]


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


def runtime_imports(path: Path, *, type_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every import of a docsrv module that runs (not under TYPE_CHECKING),
    and with ``type_only`` those made for type checking too."""
    tree = ast.parse(path.read_text())
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
    wrong = []
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    for path in modules:
        own = layer_of(module_name(path))
        for line, imported in runtime_imports(path):
            if imported != "docsrv" and layer_of(imported) > own:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert wrong == []


def test_the_layering_test_sees_a_violation():
    """It would catch one: the supervisor imports the server, the layer below it."""
    imported = dict((m, line) for line, m in runtime_imports(PACKAGE / "supervisors" / "master.py"))
    assert "docsrv.server" in imported and layer_of("docsrv.server") < layer_of("docsrv.supervisors.master")


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
