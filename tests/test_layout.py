"""The house's one-way rule, checked on the sources: files -> statemeta -> readers -> catalog, and
inside catalog render -> report -> spark -> servers -> lake -> cli. Every import counts, also the
ones inside functions (they are how a module avoids loading Spark early, not an exception to the
rule)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The rooms in data-flow order: each may import the rooms before it (statecat's own modules only).
ORDER = [
    "statemeta",
    "readers",
    "catalog.render",
    "catalog.report",
    "catalog.spark",
    "catalog.servers",
    "catalog.lake",
    "catalog.cli",
]
ALLOWED = {room: set(ORDER[:i]) for i, room in enumerate(ORDER)}
# The front doors re-export lazily (``statecat.attach``, ``statecat.catalog.session``): they may name
# any room but the CLI, and only the CLI may use them.
ALLOWED["catalog"] = set(ORDER) - {"catalog.cli"}
ALLOWED["catalog.cli"].add("catalog")
ALLOWED["catalog._root"] = {"catalog"}
ALLOWED["catalog.pyspark_statecat"] = {"catalog.spark"}


def _room(module: str) -> str:
    """The room of a dotted name below ``statecat`` (``catalog.spark.source`` -> ``catalog.spark``).
    The package root's own names (``__version__``) import nothing: ``root``, open to every room; its
    other names (``statecat.attach``) resolve into the catalog."""
    parts = module.split(".")
    if parts[0] in ("statemeta", "readers"):
        return parts[0]
    if parts[0] != "catalog":
        return "root" if parts[0].startswith("__") else "catalog"
    room = f"catalog.{parts[1]}" if len(parts) > 1 else "catalog"
    return room if room in ALLOWED else "catalog"


def _module_of(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _statecat_imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name below ``statecat``) of every import of statecat in one module's source;
    ``from statecat.catalog import cli`` names ``catalog.cli``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith("statecat."):
                yield node.lineno, name.removeprefix("statecat.")


def _sources():
    for top in ("statemeta", "readers", "catalog"):
        yield from sorted((REPO / top).rglob("*.py"))


def test_every_room_imports_only_the_rooms_before_it():
    wrong = []
    for path in _sources():
        room = _room(_module_of(path))
        for line, name in _statecat_imports(path.read_text()):
            target = _room(name)
            if target not in (room, "root") and target not in ALLOWED[room]:
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


def _readme_map() -> dict[str, set[str]]:
    """The README's map of the tree: each top folder and the names listed under it."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Layout") :].split("```")[1]
    listed: dict[str, set[str]] = {}
    top = None
    for line in block.splitlines():
        if not line.strip():
            continue
        names = line.strip().split("  ")[0]
        if not line.startswith(" "):
            top = names.rstrip("/")
            listed[top] = set()
            continue
        for name in names.replace(":", "").split(", "):
            listed[top].add(name.strip())
    return listed


def test_readme_map_matches_the_tree():
    listed = _readme_map()
    assert {"statemeta", "readers", "catalog", "tests", "bench", "sql_examples"} <= set(listed)
    for top, names in listed.items():
        for name in names:
            assert (REPO / top / name.rstrip("/")).exists(), f"README's map names {top}/{name}, which is not there"
    for top in ("statemeta", "readers"):
        modules = {p.name for p in (REPO / top).glob("*.py") if p.name != "__init__.py"}
        modules |= {p.name + "/" for p in (REPO / top).iterdir() if (p / "__init__.py").is_file()}
        assert modules <= listed[top], f"modules of {top}/ missing from the README's map: {modules - listed[top]}"
    rooms = {p.name + "/" for p in (REPO / "catalog").iterdir() if p.is_dir() and p.name != "__pycache__"}
    rooms |= {p.name for p in (REPO / "catalog").glob("*.py") if p.name != "__init__.py"}
    assert rooms <= listed["catalog"], f"missing from the README's map: {rooms - listed['catalog']}"
