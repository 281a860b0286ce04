"""The house's one-way rule, checked on the sources: files -> statemeta -> readers -> catalog, and
inside catalog render -> report -> spark -> servers -> lake -> cli. Every import counts, also the
ones inside functions (they are how a module avoids loading Spark early, not an exception to the
rule)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Each room and the rooms it may import, besides itself (statecat's own modules only).
ALLOWED = {
    "statemeta": set(),
    "readers": {"statemeta"},
    "catalog.render": {"statemeta", "readers"},
    "catalog.report": {"statemeta", "readers", "catalog.render"},
    "catalog.spark": {"statemeta", "readers", "catalog.render", "catalog.report"},
    "catalog.servers": {"statemeta", "readers", "catalog.render", "catalog.report", "catalog.spark"},
    "catalog.lake": {"statemeta", "readers", "catalog.render"},
    "catalog.cli": {
        "statemeta",
        "readers",
        "catalog.render",
        "catalog.report",
        "catalog.spark",
        "catalog.servers",
        "catalog.lake",
        "catalog",
    },
    # The package front doors re-export lazily (``statecat.attach``, ``statecat.catalog.session``).
    "catalog": {
        "statemeta",
        "readers",
        "catalog.render",
        "catalog.report",
        "catalog.spark",
        "catalog.servers",
        "catalog.lake",
        "catalog.cli",
    },
    "catalog._root": {"statemeta", "readers", "catalog"},
    "catalog.pyspark_statecat": {"catalog.spark"},
}


def _room(module: str) -> str:
    """The room of a dotted name below ``statecat`` (``catalog.spark.source`` -> ``catalog.spark``)."""
    parts = module.split(".")
    if parts[0] != "catalog" or len(parts) == 1:
        return parts[0]
    room = f"catalog.{parts[1]}"
    return room if room in ALLOWED else "catalog"


def _module_of(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _statecat_imports(source: str):
    """(line, dotted name below ``statecat``) of every import of statecat in one module's source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "statecat" else [a.name for a in node.names]
            if node.module.startswith("statecat.") and node.module.count(".") == 1:
                # ``from statecat.catalog import x``: x is a room when it is a subpackage
                names = [
                    f"{node.module}.{a.name}" if f"{node.module[9:]}.{a.name}" in ALLOWED else node.module
                    for a in node.names
                ]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == "statecat" or name.startswith("statecat."):
                yield node.lineno, name.removeprefix("statecat").lstrip(".") or "catalog._root"


def _sources():
    for top in ("statemeta", "readers", "catalog"):
        yield from sorted((REPO / top).rglob("*.py"))


def test_every_room_imports_only_the_rooms_before_it():
    wrong = []
    for path in _sources():
        room = _room(_module_of(path))
        for line, name in _statecat_imports(path.read_text()):
            target = _room(name)
            if target != room and target not in ALLOWED[room]:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {room} imports {name}")
    assert not wrong, "imports against the one-way rule:\n" + "\n".join(wrong)


def test_the_rule_sees_lazy_and_aliased_imports():
    # The check itself must be able to fail: imports inside functions and of whole rooms count.
    source = "def f():\n    from statecat.catalog.spark import source\n\nfrom statecat.catalog import cli\n"
    found = [(line, _room(name)) for line, name in _statecat_imports(source)]
    assert sorted(found) == [(2, "catalog.spark"), (4, "catalog.cli")]
    assert "catalog.spark" not in ALLOWED["readers"] and "catalog.cli" not in ALLOWED["catalog.lake"]


def test_catalog_keeps_few_modules_at_its_top():
    top = sorted(p.name for p in (REPO / "catalog").glob("*.py"))
    assert len(top) <= 10, top
    rooms = sorted(p.name for p in (REPO / "catalog").iterdir() if (p / "__init__.py").is_file())
    for room in rooms:
        doc = ast.get_docstring(ast.parse((REPO / "catalog" / room / "__init__.py").read_text()))
        assert doc, f"catalog/{room}/__init__.py says nothing about what lives there"
