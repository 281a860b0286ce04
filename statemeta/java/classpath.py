"""A job's classpath as data: class files found by name in JARs and directories, parsed with
``classfile.read_class``, never loaded.

``ClassPath(["job.jar", "build/classes"])`` looks a class up the way a class loader would search
its entries, first hit wins, and keeps each parsed class. A JAR entry is read only after its
declared size is checked against ``classfile.MAX_CLASS_BYTES`` (a zip bomb costs nothing), and a
JAR or directory that cannot be opened is an error naming it.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable

from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.java.classfile import MAX_CLASS_BYTES, JavaClass, read_class

CLASS_SUFFIX = ".class"
JAR_SUFFIXES = (".jar", ".zip")


class ClassPath:
    """Class files by binary name (``com.example.Order$Line``) from JARs and class directories."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(os.path.abspath(os.path.expanduser(e)) for e in entries)
        self._jars: dict[str, zipfile.ZipFile] = {}
        self._classes: dict[str, JavaClass | None] = {}
        for entry in self.entries:
            if os.path.isdir(entry):
                continue
            if not os.path.isfile(entry):
                raise StatecatError(
                    f"no such JAR or class directory: {entry}",
                    hint="Give --classpath the job's JAR file or the directory its .class files are under",
                )
            try:
                self._jars[entry] = zipfile.ZipFile(entry)
            except (zipfile.BadZipFile, OSError) as exc:
                raise FormatError(
                    f"expected a JAR (zip) file or a class directory, got a file that is neither ({exc})",
                    file=entry,
                    hint="Give --classpath the job's JAR file or the directory its .class files are under",
                ) from exc

    def find(self, name: str) -> JavaClass | None:
        """The class named ``name``, or None when no entry holds it."""
        if name not in self._classes:
            self._classes[name] = self._load(name)
        return self._classes[name]

    def _load(self, name: str) -> JavaClass | None:
        relative = name.replace(".", "/") + CLASS_SUFFIX
        for entry in self.entries:
            jar = self._jars.get(entry)
            if jar is None:
                path = os.path.join(entry, *relative.split("/"))
                if os.path.isfile(path):
                    return read_class(_read_bounded_file(path), path)
                continue
            try:
                info = jar.getinfo(relative)
            except KeyError:
                continue
            where = f"{entry}!/{relative}"
            if info.file_size > MAX_CLASS_BYTES:
                raise FormatError(
                    f"expected a class file of at most {MAX_CLASS_BYTES} bytes, got an entry of {info.file_size}",
                    file=where,
                )
            try:
                data = jar.read(info)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                raise FormatError(f"expected a readable JAR entry, got {exc}", file=where) from exc
            return read_class(data, where)
        return None

    def close(self) -> None:
        for jar in self._jars.values():
            jar.close()
        self._jars.clear()

    def __enter__(self) -> ClassPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_bounded_file(path: str) -> bytes:
    size = os.path.getsize(path)
    if size > MAX_CLASS_BYTES:
        raise FormatError(f"expected a class file of at most {MAX_CLASS_BYTES} bytes, got {size}", file=path)
    with open(path, "rb") as f:
        return f.read(MAX_CLASS_BYTES + 1)


__all__ = ["ClassPath"]
