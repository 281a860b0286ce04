"""The class-file reader (statemeta/java/classfile.py) and classpath lookup (statemeta/java/classpath.py) on
classes javac compiles, checked against the JDK's own ``javap -p -v``: class and field names,
access flags, erased descriptors and generic signatures, class by class. Then the must-reject
inputs: every truncation, seeded byte mutations, a newer major version, oversized JAR entries,
paths that are not JARs."""

from __future__ import annotations

import random
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from statecat.statemeta.errors import FormatError, StatecatError, UnsupportedError
from statecat.statemeta.java import classpath as classpath_module
from statecat.statemeta.java.classfile import (
    JavaClass,
    parse_descriptor,
    parse_field_signature,
    read_class,
)
from statecat.statemeta.java.classpath import ClassPath
from tests.fixtures.runtime import jdk_tool

SOURCE = Path(__file__).parent / "fixtures" / "classfile" / "Shapes.java"
PACKAGE = "example.shapes"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(class directory, the same classes as a JAR, javap's text per class)."""
    root = tmp_path_factory.mktemp("classfile")
    classes = root / "classes"
    subprocess.run([jdk_tool("javac"), "--release", "17", "-d", str(classes), str(SOURCE)], check=True)
    jar = root / "shapes.jar"
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    names = [_binary_name(p, classes) for p in sorted(classes.rglob("*.class"))]
    javap = subprocess.run(
        [jdk_tool("javap"), "-p", "-v", "-cp", str(classes), *names], check=True, capture_output=True, text=True
    ).stdout
    blocks = re.split(r"^Classfile ", javap, flags=re.M)[1:]
    by_name = {}
    for block in blocks:
        this = re.search(r"^  this_class: #\d+\s+// (\S+)$", block, re.M)
        assert this is not None, block[:500]
        by_name[this.group(1).replace("/", ".")] = block
    assert set(by_name) == set(names)
    return classes, jar, by_name


def _binary_name(path: Path, classes: Path) -> str:
    return path.relative_to(classes).with_suffix("").as_posix().replace("/", ".")


_MODIFIERS = {"public", "private", "protected", "static", "final", "transient", "volatile", "abstract"}


def _javap_fields(block: str) -> list[dict]:
    """Fields as javap shows them: declaration type text, name, descriptor, flags, Signature."""
    body = block[block.index("\n{\n") : block.rindex("\n}\n")]
    fields = []
    members = re.split(r"\n\n", body.strip("\n{}"))
    for member in members:
        lines = member.strip("\n").split("\n")
        descriptor = re.match(r"^    descriptor: (\S+)$", lines[1]) if len(lines) > 1 else None
        if descriptor is None or descriptor.group(1).startswith("("):
            continue  # a method
        declaration = lines[0].strip().rstrip(";").split(" ")
        name = declaration.pop()
        while declaration and declaration[0] in _MODIFIERS:
            declaration.pop(0)
        flags = re.search(r"^    flags: \((0x[0-9a-f]{4})\)", member, re.M)
        signature = re.search(r"^    Signature: #\d+\s+// (\S+)$", member, re.M)
        assert flags is not None, member
        fields.append(
            {
                "name": name,
                "type": " ".join(declaration),
                "descriptor": descriptor.group(1),
                "flags": int(flags.group(1), 16),
                "signature": signature.group(1) if signature else None,
            }
        )
    return fields


def test_every_class_reads_as_javap_shows_it(compiled: tuple[Path, Path, dict[str, str]]) -> None:
    classes, jar, javap = compiled
    assert len(javap) >= 8  # Shapes, its enum, base, order, inner line, pair, interface, record
    with ClassPath([str(classes)]) as from_dir, ClassPath([str(jar)]) as from_jar:
        for name, block in javap.items():
            parsed = from_dir.find(name)
            assert parsed is not None, name
            assert from_jar.find(name) == parsed
            _assert_class_matches(parsed, block)


def _assert_class_matches(parsed: JavaClass, block: str) -> None:
    major = re.search(r"^  major version: (\d+)$", block, re.M)
    flags = re.search(r"^  flags: \((0x[0-9a-f]{4})\)", block, re.M)
    superclass = re.search(r"^  super_class: #\d+\s+// (\S+)$", block, re.M)
    counts = re.search(r"^  interfaces: (\d+), fields: (\d+)", block, re.M)
    assert major and flags and superclass and counts, block[:800]
    assert parsed.major == int(major.group(1))
    assert parsed.access == int(flags.group(1), 16)
    assert parsed.superclass == superclass.group(1).replace("/", ".")
    assert len(parsed.interfaces) == int(counts.group(1))
    declaration = block[: block.index("\n  minor version")].rsplit("\n", 1)[-1]
    for interface in parsed.interfaces:
        assert interface in declaration, (interface, declaration)
    class_signature = re.search(r"^Signature: #\d+\s+// (\S+)$", block, re.M)
    assert (parsed.signature is None) == (class_signature is None)
    if parsed.signature is not None:
        assert parsed.signature.superclass.name == parsed.superclass
        assert [i.name for i in parsed.signature.interfaces] == list(parsed.interfaces)
    expected = _javap_fields(block)
    assert len(expected) == int(counts.group(2))
    assert [f.name for f in parsed.fields] == [f["name"] for f in expected]
    for field, want in zip(parsed.fields, expected, strict=True):
        assert field.access == want["flags"], field.name
        assert field.type == parse_descriptor(want["descriptor"])
        assert (field.generic is None) == (want["signature"] is None), field.name
        if field.generic is not None:
            assert field.generic == parse_field_signature(want["signature"])
        # javap's declaration spells the (generic) type the way JavaType prints it
        assert str(field.generic or field.type) == want["type"], field.name


def test_what_a_field_layout_needs(compiled: tuple[Path, Path, dict[str, str]]) -> None:
    classes, _, _ = compiled
    with ClassPath([str(classes)]) as cp:
        order = cp.find(f"{PACKAGE}.Shapes$Order")
        base = cp.find(f"{PACKAGE}.Shapes$Base")
        line = cp.find(f"{PACKAGE}.Shapes$Order$Line")
        colour = cp.find(f"{PACKAGE}.Shapes$Colour")
        point = cp.find(f"{PACKAGE}.Shapes$Point")
        assert cp.find(f"{PACKAGE}.Missing") is None
    assert order is not None and base is not None and line is not None and colour is not None and point is not None
    assert order.is_final and not order.is_abstract and base.is_abstract and colour.is_enum
    fields = {f.name: f for f in order.fields}
    assert str(fields["linesByItem"].generic) == "java.util.Map<java.lang.String, java.util.List<java.lang.Integer>>"
    assert str(fields["grid"].type) == "int[][]" and fields["grid"].generic is None
    assert str(fields["odd"].generic) == "java.util.Map<? extends java.lang.Number, ?>"
    assert order.signature is not None
    assert (
        str(order.signature.superclass)
        == "example.shapes.Shapes$Base<java.lang.String, java.util.ArrayList<java.lang.Object>>"
    )
    assert base.signature is not None and base.signature.type_parameters == ("T", "L")
    base_fields = {f.name: f for f in base.fields}
    assert base_fields["serialVersionUID"].is_static and base_fields["cachedHash"].is_transient
    assert str(base_fields["first"].generic) == "T"
    assert [f.name for f in line.fields if f.is_synthetic] == ["this$0"]
    assert [f.name for f in point.fields] == ["x", "y", "label"]


def test_every_truncation_is_named(compiled: tuple[Path, Path, dict[str, str]]) -> None:
    classes, _, _ = compiled
    path = classes / "example" / "shapes" / "Shapes$Order.class"
    data = path.read_bytes()
    for cut in range(len(data)):
        with pytest.raises(FormatError) as caught:
            read_class(data[:cut], "Order.class")
        assert "truncated" in caught.value.message, (cut, str(caught.value))
        assert caught.value.file == "Order.class" and caught.value.offset is not None


def test_mutated_class_files_fail_cleanly(compiled: tuple[Path, Path, dict[str, str]]) -> None:
    classes, _, _ = compiled
    rng = random.Random(27)
    originals = [p.read_bytes() for p in sorted(classes.rglob("*.class"))]
    outcomes = {"read": 0, "refused": 0}
    for _ in range(3000):
        data = bytearray(rng.choice(originals))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            read_class(bytes(data), "mutated.class")
            outcomes["read"] += 1
        except StatecatError as exc:  # anything else (IndexError, RecursionError, ...) fails the test
            assert exc.file == "mutated.class"
            outcomes["refused"] += 1
    assert outcomes["read"] and outcomes["refused"]


def test_refusals_say_what_was_expected(
    compiled: tuple[Path, Path, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    classes, jar, _ = compiled
    data = (classes / "example" / "shapes" / "Shapes.class").read_bytes()
    with pytest.raises(FormatError, match=r"expected the class file magic 0xcafebabe, got 0x504b0304"):
        read_class(b"PK\x03\x04" + data[4:], "x.class")
    newer = data[:6] + (99).to_bytes(2, "big") + data[8:]
    with pytest.raises(UnsupportedError, match=r"major version 99; statecat reads 45 \(JDK 1.0\) to 69") as caught:
        read_class(newer, "x.class")
    assert caught.value.offset == 6
    with pytest.raises(StatecatError, match="no such JAR or class directory"):
        ClassPath([str(tmp_path / "nope.jar")])
    not_a_jar = tmp_path / "job.jar"
    not_a_jar.write_text("not a zip")
    with pytest.raises(FormatError, match="expected a JAR"):
        ClassPath([str(not_a_jar)])
    # A JAR entry larger than any class file is refused before it is inflated.
    monkeypatch.setattr(classpath_module, "MAX_CLASS_BYTES", 64)
    with ClassPath([str(jar)]) as cp, pytest.raises(FormatError, match="at most 64 bytes") as caught:
        cp.find(f"{PACKAGE}.Shapes$Order")
    assert caught.value.file is not None and caught.value.file.endswith("!/example/shapes/Shapes$Order.class")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Ljava/util/List<>;", "at least one type argument"),
        ("Ljava/util/List", "';'"),
        ("Q", "a type"),
        ("[", "a type"),
        ("II", "the end of the type"),
        ("TT", "';'"),
    ],
)
def test_bad_signatures_are_refused(text: str, message: str) -> None:
    with pytest.raises(FormatError, match=re.escape(message)):
        parse_field_signature(text, "x.class", 10)
