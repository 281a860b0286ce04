"""The expressions of state edits (catalog/spark/edit_sql.py) give what Spark gives: the same
expressions over the same rows, evaluated by a real Spark session (ANSI mode, Spark 4's default)
and by statecat's evaluator, must agree value for value, and fail together."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
import sqlglot

from statecat.catalog.spark.edit_sql import EditError, ExpressionCompiler, sql_type_of_arrow

SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("n", pa.int32()),
        ("big", pa.int64()),
        ("d", pa.decimal128(10, 2)),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("value", pa.struct([("f0", pa.int64()), ("f1", pa.int64())])),
        ("arr", pa.list_(pa.int32())),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("day", pa.date32()),
    ]
)
ROWS = [
    {
        "key": "k_1",
        "n": 7,
        "big": 9223372036854775000,
        "d": Decimal("12.35"),
        "x": 2.5,
        "s": "42",
        "value": {"f0": 3, "f1": -946},
        "arr": [4, 5, 6],
        "m": [("a", 1), ("b", 2)],
        "day": dt.date(2024, 2, 29),
    },
    {
        "key": "k%2",
        "n": -7,
        "big": -5,
        "d": Decimal("-0.05"),
        "x": -0.0,
        "s": " x ",
        "value": {"f0": None, "f1": 0},
        "arr": [],
        "m": [],
        "day": dt.date(1970, 1, 1),
    },
    {
        "key": "K_3",
        "n": None,
        "big": None,
        "d": None,
        "x": None,
        "s": None,
        "value": None,
        "arr": None,
        "m": None,
        "day": None,
    },
]

EXPRESSIONS = [
    "value.f0 + 1",
    "value.f0 * n",
    "value.f1 - big",
    "n / 2",
    "n % 3",
    "-n % 3",
    "n % -3",
    "d + 1.005",
    "d * d",
    "d - n",
    "d * 2.5D",
    "x * n",
    "-x",
    "abs(n)",
    "CASE WHEN n > 1 THEN 'big' WHEN n < 0 THEN 'negative' ELSE 'other' END",
    "if(n > 0, d, x)",
    "coalesce(value.f0, n, 5)",
    "key LIKE 'k\\\\%%'",
    "key LIKE 'k_1'",
    "n IN (7, NULL)",
    "n IN (1, 2)",
    "n BETWEEN -7 AND 0",
    "NOT (n > 0 AND value.f0 IS NULL)",
    "n > 0 OR value.f0 IS NULL",
    "value.f0 IS NOT NULL",
    "key = 'k_1'",
    "d > 12.345",
    "x = 0",
    "CAST(s AS INT)",
    "TRY_CAST(s AS INT)",
    "CAST(n AS STRING)",
    "CAST(d AS BIGINT)",
    "CAST(x AS INT)",
    "CAST(n AS DECIMAL(5, 1))",
    "concat(key, '-', s)",
    "upper(key)",
    "lower(key)",
    "m['a']",
    "m['zzz']",
    "named_struct('a', n, 'b', d)",
    "array(n, 1L)",
    "map('k', n)",
    "day > DATE '2000-01-01'",
    "CAST(day AS TIMESTAMP_NTZ)",
    "12345678901",
    "1.50",
    "big + 1000",
    "n / 0",
    "n % 0",
    "CAST(s AS BIGINT)",
]


def _ours(expression: str):
    compiler = ExpressionCompiler({f.name: sql_type_of_arrow(f.type) for f in SCHEMA}, "t")
    typed = compiler.compile(sqlglot.parse_one(expression, read="spark"))
    out = []
    for row in ROWS:
        try:
            out.append(("value", _normal(typed.run(row))))
        except EditError as exc:
            out.append(("error", str(exc).split(":")[0]))
    return str(typed.type), out


def _normal(value):
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _normal(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_normal(v) for v in value)
    return value


@pytest.fixture(scope="module")
def spark():
    from statecat.catalog.servers.sessions import session

    spark = session()
    spark.conf.set("spark.sql.ansi.enabled", "true")
    ddl = (
        "key STRING, n INT, big BIGINT, d DECIMAL(10,2), x DOUBLE, s STRING, value STRUCT<f0: BIGINT, f1: BIGINT>, "
        "arr ARRAY<INT>, m MAP<STRING, BIGINT>, day DATE"
    )
    data = [{**row, "m": None if row["m"] is None else dict(row["m"])} for row in ROWS]
    spark.createDataFrame([tuple(r[f.name] for f in SCHEMA) for r in data], ddl).createOrReplaceTempView("t")
    return spark


def _spark_type(spark, expression: str) -> str:
    data_type = spark.sql(f"SELECT {expression} AS r FROM t").schema["r"].dataType
    return data_type.simpleString().upper().replace(",", ", ").replace("STRUCT<", "STRUCT<").replace(":", ": ")


def _theirs(spark, expression: str):
    out = []
    for i in range(len(ROWS)):
        try:
            rows = spark.sql(
                f"SELECT {expression} AS r FROM (SELECT *, row_number() OVER (ORDER BY key) AS i FROM t) "
                f"WHERE key = '{ROWS[i]['key']}'"
            ).collect()
            value = rows[0]["r"]
            if isinstance(value, dict):  # a MAP comes back as a dict; statecat keeps Arrow's pairs
                value = list(value.items())
            out.append(("value", _normal(value)))
        except Exception as exc:  # Spark's errors: the condition name is what must agree
            name = type(exc).__name__
            condition = getattr(exc, "getCondition", lambda: None)() or name
            out.append(("error", condition))
    return out


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_expression_agrees_with_spark(spark, expression):
    our_type, ours = _ours(expression)
    theirs = _theirs(spark, expression)
    for (kind_a, a), (kind_b, b) in zip(ours, theirs):
        assert kind_a == kind_b, f"{expression}: statecat {kind_a} {a!r}, Spark {kind_b} {b!r}"
        if kind_a == "error":
            assert a == b, f"{expression}: statecat fails with {a}, Spark with {b}"
        elif isinstance(b, float) and isinstance(a, float):
            assert a == pytest.approx(b) and str(a)[0] == str(b)[0]
        else:
            assert a == b and type(a) is type(b), f"{expression}: statecat {a!r}, Spark {b!r}"
    assert our_type.replace(" ", "").upper() == _spark_type(spark, expression).replace(" ", "").upper(), expression
