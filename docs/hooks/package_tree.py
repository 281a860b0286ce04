"""MkDocs hook: the installed package's module tree, for mkdocstrings to read statically.

The repository's folders are mapped to `statecat.*` by setuptools' package-dir (`statecat` itself is
`catalog/_root`, `statecat.readers` is `readers/`), which griffe cannot follow from the editable
install. This hook links the folders into a temporary directory laid out as the installed package
and hands that directory to the python handler as its search path; it is removed when the build ends.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
_tree: Path | None = None


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: dict) -> dict:
    global _tree
    if _tree is None:
        _tree = Path(tempfile.mkdtemp(prefix="statecat-docs-packages-"))
        link_packages(_tree)
    handler = config["plugins"]["mkdocstrings"].config["handlers"].setdefault("python", {})
    handler["paths"] = [str(_tree)]
    return config


def on_shutdown() -> None:
    global _tree
    if _tree is not None:
        shutil.rmtree(_tree, ignore_errors=True)
        _tree = None


def link_packages(tree: Path) -> None:
    """Each top-level name of package-dir as a link (a nested package inside its parent's folder when
    the folders nest as the names do, else a directory of links)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name in sorted(package_dir, key=lambda n: n.count(".")):
        target = tree.joinpath(*name.split("."))
        if target.exists():  # already reached through its parent's link
            continue
        source = ROOT / package_dir[name]
        if "." in name:
            target.symlink_to(source, target_is_directory=True)
        else:  # a root package: its own files, its subpackages linked beside them
            target.mkdir()
            for entry in source.iterdir():
                if entry.is_file():
                    (target / entry.name).symlink_to(entry)
