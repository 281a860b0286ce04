"""The house's one-way rule, checked on the sources: files -> statemeta -> readers -> writers ->
catalog, and inside catalog render -> report -> spark -> servers -> lake -> cli. Every import counts,
also the ones inside functions (they are how a module avoids loading Spark early, not an exception
to the rule). Inside the two lower floors the rooms have an order of their own (INNER_ORDER), where
imports for annotations only (``if TYPE_CHECKING:``) do not count: the modules of one layer name
each other's types freely, but run in one direction."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The rooms in data-flow order: each may import the rooms before it (statecat's own modules only).
ORDER = [
    "statemeta",
    "readers",
    "writers",
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
    if parts[0] in ("statemeta", "readers", "writers"):
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


def _statecat_imports(source: str, run_time_only: bool = False) -> Iterator[tuple[int, str]]:
    """(line, dotted name below ``statecat``) of every import of statecat in one module's source;
    ``from statecat.catalog import cli`` names ``catalog.cli``. ``run_time_only``: without the
    imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(source)
    typing_only = set()
    if run_time_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                typing_only |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
    for top in ("statemeta", "readers", "writers", "catalog"):
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
    assert "writers" not in ALLOWED["readers"] and "writers" in ALLOWED["catalog.spark"]


# The rooms of statemeta and readers in the order they run: each may import, at run time, only
# the ones before it. Top-level modules belong to the room their job is (the model's helpers to
# "statemeta.base", the model itself and what builds on it to "statemeta.model").
INNER_ORDER = [
    "statemeta.base",
    "statemeta.java",
    "statemeta.files",
    "statemeta.model",
    "statemeta.snapshotter",
    "statemeta",
    "readers.codecs",
    "readers.keygroups",
    "readers.backends",
    "readers.scans",
    "readers",
]
STATEMETA_BASE = {"errors", "types", "binary", "source_splits"}
# Loading a StateMeta reads the snapshotter's stateInfo when one matches _metadata (model.py).
INNER_EXCEPTIONS = {("statemeta/model.py", "statemeta.snapshotter.stateinfo.load_fresh_state_info")}


def _inner_room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return parts[0]
    if parts[0] == "statemeta":
        if parts[1] in ("files", "java", "snapshotter"):
            return f"statemeta.{parts[1]}"
        return "statemeta.base" if parts[1] in STATEMETA_BASE else "statemeta.model"
    return f"readers.{parts[1]}" if parts[1] in ("codecs", "backends", "scans") else "readers.keygroups"


def test_the_lower_floors_rooms_run_one_way():
    wrong = []
    for top in ("statemeta", "readers"):
        for path in sorted((REPO / top).rglob("*.py")):
            room = _inner_room(_module_of(path))
            for line, name in _statecat_imports(path.read_text(), run_time_only=True):
                if name.split(".")[0] != top:
                    continue
                target = _inner_room(name)
                relative = str(path.relative_to(REPO))
                if INNER_ORDER.index(target) > INNER_ORDER.index(room) and (relative, name) not in INNER_EXCEPTIONS:
                    wrong.append(f"{relative}:{line}: {room} imports {name}")
    assert not wrong, "imports against the rooms' order:\n" + "\n".join(wrong)


def test_the_inner_rule_sees_run_time_imports_only():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from statecat.readers.scans.scan import S\n"
    source += "def f():\n    from statecat.readers.scans.scan import T\n"
    assert list(_statecat_imports(source, run_time_only=True)) == [(5, "readers.scans.scan.T")]
    assert INNER_ORDER.index(_inner_room("readers.scans.scan")) > INNER_ORDER.index(_inner_room("readers.backends.sst"))


def test_every_folder_keeps_few_modules_and_says_what_lives_there():
    for top in ("statemeta", "readers", "writers", "catalog"):
        modules = sorted(p.name for p in (REPO / top).glob("*.py") if p.name != "__init__.py")
        assert len(modules) <= 12, f"{top}/ holds {len(modules)} modules beside its rooms: {modules}"
        for package in [REPO / top, *sorted(p.parent for p in (REPO / top).rglob("*/__init__.py"))]:
            doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
            assert doc, f"{package.relative_to(REPO)}/__init__.py says nothing about what lives there"


def test_no_python_file_is_over_a_thousand_lines():
    files = [
        *_sources(),
        *(REPO / "tests").rglob("*.py"),
        *(REPO / "bench").rglob("*.py"),
        *(REPO / "docs").rglob("*.py"),
    ]
    long = [
        f"{path.relative_to(REPO)}: {lines} lines"
        for path in files
        if "cases" not in path.relative_to(REPO).parts and (lines := len(path.read_text().splitlines())) > 1050
    ]
    assert not long, long


def _readme_map() -> dict[str, set[str]]:
    """The README's map of the tree: each top folder and the paths listed under it (a room's
    modules, indented below the room, as ``room/module.py``)."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Layout") :].split("```")[1]
    listed: dict[str, set[str]] = {}
    top = room = None
    for line in block.splitlines():
        if not line.strip():
            continue
        names = line.strip().split("  ")[0]
        depth = (len(line) - len(line.lstrip())) // 2
        if depth == 0:
            top, room = names.rstrip("/"), None
            listed[top] = set()
            continue
        for name in names.replace(":", "").split(", "):
            name = name.strip()
            if depth == 1:
                listed[top].add(name)
                room = name if name.endswith("/") and "/" not in name[:-1] else None
            else:
                assert room, f"README's map indents {name} below a line that is not a room"
                listed[top].add(room + name)
    return listed


def test_readme_map_matches_the_tree():
    listed = _readme_map()
    assert {"statemeta", "readers", "writers", "catalog", "tests", "bench", "sql_examples"} <= set(listed)
    for top, names in listed.items():
        for name in names:
            assert (REPO / top / name.rstrip("/")).exists(), f"README's map names {top}/{name}, which is not there"
    for top in ("statemeta", "readers", "writers"):
        modules = set()
        for path in (REPO / top).rglob("*.py"):
            relative = path.relative_to(REPO / top)
            if path.name == "__init__.py" or len(relative.parts) > 2:
                continue  # a room's subpackage (backends/sst/) is listed whole
            modules.add(str(relative))
        modules |= {f"{p.parent.relative_to(REPO / top)}/" for p in (REPO / top).glob("*/__init__.py")}
        modules |= {f"{p.parent.relative_to(REPO / top)}/" for p in (REPO / top).glob("*/*/__init__.py")}
        assert modules <= listed[top], f"modules of {top}/ missing from the README's map: {modules - listed[top]}"
    rooms = {p.name + "/" for p in (REPO / "catalog").iterdir() if p.is_dir() and p.name != "__pycache__"}
    rooms |= {p.name for p in (REPO / "catalog").glob("*.py") if p.name != "__init__.py"}
    assert rooms <= listed["catalog"], f"missing from the README's map: {rooms - listed['catalog']}"
