"""How the commands print rows: a text table, CSV or JSON, with values rendered one way."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from typing import Any, TextIO

from statecat.catalog.render import json_value

# A table row stays one line: line breaks and tabs inside a cell print as escapes (CSV and JSON keep them).
_CELL_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def cell(value: Any) -> str:
    """A value as one text cell: empty for null, text as is, anything else as JSON."""
    if value is None:
        return ""
    converted = json_value(value)
    return converted if isinstance(converted, str) else json.dumps(converted, ensure_ascii=False)


def row_json(row: Any) -> dict:
    """A key view row (``KeyRow``) as JSON-ready data."""
    return {name: json_value(value) for name, value in row.as_dict().items()}


def write_table(out: TextIO, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Rows of text cells as a boxed table, then the row count. Cells are never cut: a column is as
    wide as its widest cell."""
    cells = [[c.translate(_CELL_ESCAPES) for c in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out.write(line + "\n")
    out.write("|" + "|".join(f" {c:<{w}} " for c, w in zip(columns, widths)) + "|\n")
    out.write(line + "\n")
    for row in cells:
        out.write("|" + "|".join(f" {c:<{w}} " for c, w in zip(row, widths)) + "|\n")
    out.write(line + "\n")
    out.write(f"{len(rows)} row{'s' if len(rows) != 1 else ''}\n")


def write_rows(out: TextIO, fmt: str, columns: list[str], rows: list[list]) -> None:
    """Rows of JSON-ready values as ``json`` (an object per line), ``csv`` or a ``table``."""
    if fmt == "json":
        for row in rows:
            out.write(json.dumps(dict(zip(columns, row)), ensure_ascii=False) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([cell(v) for v in row])
    else:
        write_table(out, columns, [[cell(v) for v in row] for row in rows])
