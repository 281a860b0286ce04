"""Python values checked against the type they are written as, before an encoder writes them.

Each check takes what a decoder returns and what pyarrow's ``to_pylist()`` gives for the column
(``datetime``, ``date``, ``Decimal``, a dict or a list of pairs for a map) and returns the number,
text or bytes to write, or raises an ``EncodeError`` naming what was expected and what was given.
Nothing is wrapped, rounded or truncated silently.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from decimal import Decimal
from numbers import Real
from typing import Any

from statecat.readers.codecs.decoders import (
    EPOCH_ORDINAL,
    EXACT,
    MAX_DAYS,
    MAX_MICROS,
    MIN_DAYS,
    MIN_MICROS,
)
from statecat.statemeta.errors import StatecatError

Encoder = Callable[[Any, bytearray], None]


NANOS_PER_MICRO = 1000


NANOS_PER_MILLI = 1_000_000


NANOS_PER_SECOND = 1_000_000_000


MAX_NANOS_DIGITS = 9


MAX_REPR = 80  # characters of a refused value shown in an error


_EPOCH = dt.datetime(1970, 1, 1)


_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


_ONE_MICRO = dt.timedelta(microseconds=1)


_TIME_TEXT = re.compile(r"(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


class EncodeError(StatecatError, ValueError):
    """A value that does not fit the type it is written as: it names the value's place, what was
    expected and what was given."""

    def __init__(self, expected: str, value: Any, path: str = "", root: str = "value", note: str = "") -> None:
        self.expected, self.value, self.path, self.root, self.note = expected, value, path, root, note
        super().__init__(f"expected {expected} for {root}{path}, got {_show(value)}" + (f": {note}" if note else ""))

    def within(self, step: str) -> EncodeError:
        """The same error one level further out: ``step`` is the field, index or part it sits in."""
        return EncodeError(self.expected, self.value, step + self.path, self.root, self.note)

    def named(self, root: str) -> EncodeError:
        return EncodeError(self.expected, self.value, self.path, root, self.note)

    def __reduce__(self) -> tuple:
        return (EncodeError, (self.expected, self.value, self.path, self.root, self.note))


def _refuse(expected: str, value: Any) -> EncodeError:
    """The error for a value of the wrong type; NULL gets its own reason."""
    return EncodeError(expected, value, note="this serializer writes no NULL" if value is None else "")


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > MAX_REPR:
        text = text[: MAX_REPR - 3] + "..."
    return f"{text} ({type(value).__name__})"


def _integer(value: Any, expected: str) -> int:
    """An int from an int (or anything with __index__, e.g. numpy integers), never from a bool."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise _refuse(expected, value)
    return operator.index(value)


def _ranged(value: Any, lo: int, hi: int, expected: str) -> int:
    number = _integer(value, expected)
    if not lo <= number <= hi:
        raise EncodeError(f"{expected} within {lo}..{hi}", value)
    return number


def _real(value: Any, expected: str) -> float:
    if value.__class__ is float:
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _refuse(expected, value)
    return float(value)


def _text(value: Any, expected: str) -> str:
    if value.__class__ is not str:
        raise _refuse(expected, value)
    return value


def _binary(value: Any, expected: str) -> bytes:
    if value.__class__ is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _refuse(expected, value)


def _utf8(value: Any, expected: str) -> bytes:
    try:
        return _text(value, expected).encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"{expected} (valid Unicode: no unpaired surrogates)", value) from None


def _boolean(value: Any, expected: str = "a BOOLEAN (bool)") -> bool:
    if value is True or value is False:
        return value
    raise _refuse(expected, value)


def _epoch_days(value: Any, expected: str) -> int:
    """Epoch days from days (what the decoders return) or a datetime.date (what Arrow gives)."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.toordinal() - EPOCH_ORDINAL
    if isinstance(value, dt.datetime):
        raise EncodeError(f"{expected}, a date without a time of day", value)
    return _ranged(value, MIN_DAYS, MAX_DAYS, expected)


def _epoch_micros(value: Any, expected: str, utc: bool) -> int:
    """Epoch microseconds from an int (the decoders' form) or a datetime (Arrow's).

    ``utc``: an instant (TIMESTAMP_LTZ, Instant, java.util.Date), where an aware datetime is
    converted and a naive one is read as UTC; otherwise a wall-clock TIMESTAMP, where an aware
    datetime is refused: its offset would be silently dropped."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return (value - _EPOCH) // _ONE_MICRO
        if not utc:
            raise EncodeError(f"{expected} (a datetime without a time zone)", value)
        return (value - _EPOCH_UTC) // _ONE_MICRO
    if isinstance(value, dt.date):
        raise EncodeError(expected, value)
    return _ranged(value, MIN_MICROS, MAX_MICROS, expected)


def _whole(micros: int, unit: int, value: Any, expected: str) -> int:
    """``micros`` in a coarser ``unit``, refused when it has digits below the unit."""
    whole, rest = divmod(micros, unit)
    if rest:
        raise EncodeError(f"{expected} (no digits below its precision)", value)
    return whole


def _nanos_of_day(value: Any, expected: str) -> int:
    """A time of day from the decoders' text (HH:MM:SS[.fraction]) or a datetime.time."""
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise EncodeError(f"{expected} (a time without a time zone)", value)
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * NANOS_PER_SECOND + value.microsecond * NANOS_PER_MICRO
    text = _text(value, f"{expected} (text HH:MM:SS[.fraction] or datetime.time)")
    match = _TIME_TEXT.fullmatch(text)
    if match is None:
        raise EncodeError(f"{expected} (text HH:MM:SS[.fraction] or datetime.time)", value)
    h, m, s, frac = match.groups()
    hours, minutes, seconds = int(h), int(m), int(s)
    if hours > 23 or minutes > 59 or seconds > 59:
        raise EncodeError(f"{expected} (a time of day 00:00:00 to 23:59:59.999999999)", value)
    nanos = int(frac.ljust(MAX_NANOS_DIGITS, "0")) if frac else 0
    return ((hours * 60 + minutes) * 60 + seconds) * NANOS_PER_SECOND + nanos


def _millis_of_day(value: Any, expected: str) -> int:
    nanos = _nanos_of_day(value, expected)
    if nanos % NANOS_PER_MILLI:
        raise EncodeError(f"{expected} (at most millisecond digits)", value)
    return nanos // NANOS_PER_MILLI


def _unscaled(value: Any, precision: int, scale: int, expected: str) -> int:
    """DECIMAL(precision, scale)'s unscaled integer of a Decimal or int, exactly (never rounded)."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise EncodeError(expected, value)
        scaled = value.scaleb(scale, EXACT)
        if scaled != scaled.to_integral_value():
            raise EncodeError(f"{expected} (at most {scale} digits after the point)", value)
        if scaled and scaled.adjusted() >= precision:  # refused before int() of a huge exponent
            raise EncodeError(f"{expected} (at most {precision} digits)", value)
        unscaled = int(scaled)
    else:
        if isinstance(value, float):  # a float is not exact: refused rather than rounded
            raise EncodeError(f"{expected} (a decimal.Decimal or int)", value)
        unscaled = _integer(value, f"{expected} (a decimal.Decimal or int)") * 10**scale
    if not -(10**precision) < unscaled < 10**precision:
        raise EncodeError(f"{expected} (at most {precision} digits)", value)
    return unscaled


def _big_integer_bytes(number: int) -> bytes:
    """Java's BigInteger.toByteArray(): minimal big-endian two's complement, at least one byte."""
    length = (number if number >= 0 else ~number).bit_length() // 8 + 1
    return number.to_bytes(length, "big", signed=True)


def _fields_of(
    value: Any, names: Sequence[str], expected: str, keyset: frozenset[str] | None = None
) -> Mapping[str, Any]:
    """A struct value: a mapping holding exactly these field names (``keyset``: them, precomputed)."""
    if value.__class__ is not dict and not isinstance(value, Mapping):
        raise _refuse(expected, value)
    keys: AbstractSet[object] = value.keys()
    if keys != (keyset if keyset is not None else set(names)):
        missing = [n for n in names if n not in value]
        extra = [str(k) for k in value if k not in names]
        what = (f"; missing {', '.join(missing)}" if missing else "") + (
            f"; unknown {', '.join(extra)}" if extra else ""
        )
        raise EncodeError(f"{expected}{what}", value)
    return value


def _pairs(value: Any, expected: str) -> list[tuple[Any, Any]]:
    """Map entries from a list of (key, value) pairs (the decoders' and Arrow's form) or a mapping."""
    if isinstance(value, Mapping):
        return list(value.items())
    if not isinstance(value, (list, tuple)):
        raise _refuse(expected, value)
    entries = []
    for i, entry in enumerate(value):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise EncodeError("a (key, value) pair", entry, f"[{i}]")
        entries.append((entry[0], entry[1]))
    return entries


def _sequence(value: Any, expected: str) -> Sequence[Any]:
    if value.__class__ is list or isinstance(value, (list, tuple)):
        return value
    raise _refuse(expected, value)


def _not_null(encode: Encoder, expected: str) -> Encoder:
    """``encode`` for a serializer that cannot write NULL: None is refused by name."""

    def checked(value: Any, out: bytearray) -> None:
        if value is None:
            raise _refuse(expected, value)
        encode(value, out)

    return checked
