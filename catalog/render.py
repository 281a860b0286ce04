"""Decoded values as JSON-ready data, the one rendering the CLI, the operator tables and tests share.

Takes both shapes values arrive in: Arrow's Python values (structs as dicts, maps as lists of
``(key, value)`` tuples) and Spark's (structs as Rows, maps as dicts). Maps with text keys become
objects, other maps ``[key, value]`` pairs; bytes ``{"hex": …}``; decimals text; times ISO text.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any


def json_value(value: Any) -> Any:
    if hasattr(value, "asDict"):  # a Spark Row (a tuple subclass, so tested first)
        return {k: json_value(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return _pairs(list(value.items()))
    if isinstance(value, list):
        if value and all(type(item) is tuple and len(item) == 2 for item in value):  # an Arrow map
            return _pairs(value)
        return [json_value(v) for v in value]
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, Decimal):
        return format(value, "f")  # plain digits: 0.0000000000, never 0E-10
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return value


def _pairs(items: list) -> dict | list:
    if all(isinstance(k, str) for k, _ in items):
        return {k: json_value(v) for k, v in items}
    return [[json_value(k), json_value(v)] for k, v in items]
