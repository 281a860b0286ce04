"""Pictures of a savepoint's state (matplotlib): sizes per operator and state, key-group skew,
the largest keys, and a rescale preview. The numbers come from ``statecat.readers.skew``.

    from statecat.readers import SavepointReader, skew
    from statecat.catalog import plots

    reader = SavepointReader(path)
    plots.state_sizes(skew.state_sizes(reader))
    groups = skew.key_group_stats(reader, "accState")
    plots.key_group_skew(groups)
    plots.top_keys(skew.top_keys(reader, "accState", n=10))
    plots.rescale_preview(groups, parallelism=4)

Each function returns a matplotlib ``Figure`` (no pyplot, so no GUI backend and no global figure
state); a notebook displays it as PNG, ``png_bytes`` renders it for a report.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from matplotlib.figure import Figure

from statecat.readers import skew
from statecat.statemeta.html import size_text

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes

# Text from the savepoint (state names, keys) may hold "$": never read it as mathtext.
_TEXT: dict[str, Any] = {"parse_math": False}
WIDTH_INCHES = 10
MAX_LABEL_CHARS = 48
MAX_BARS = 1024
_UNIT_BYTES = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_FigureT = TypeVar("_FigureT", bound=Figure)


class Plot(Figure):
    """A Figure that notebooks show as PNG even when matplotlib's inline backend is not active."""

    def _repr_png_(self) -> bytes:
        return png_bytes(self)


def png_bytes(figure: Figure, dpi: int = 100) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=dpi)
    return out.getvalue()


def _short(text: str) -> str:
    text = str(text)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _subtask_color(subtask: int) -> str:
    return f"C{subtask % 10}"


def _in_unit(values: Sequence[float]) -> tuple[list[float], str]:
    """Byte counts in the binary unit of the largest, so that the axis ticks are round numbers."""
    top = max(values, default=0)
    unit = next((u for u, size in _UNIT_BYTES.items() if top < 1024 * size), "GiB")
    return [v / _UNIT_BYTES[unit] for v in values], unit


def _bar_label(size: int, entries: int | None) -> str:
    label = f" {size_text(size)}"
    return label if entries is None else f"{label}, {entries:,} entr{'y' if entries == 1 else 'ies'}"


def _empty(figure: _FigureT, message: str) -> _FigureT:
    figure.text(0.5, 0.5, message, ha="center", va="center", **_TEXT)
    return figure


def state_sizes(sizes: skew.SizeTable) -> Plot:
    """Bytes of every state (from ``skew.state_sizes``), one bar each, grouped by operator."""
    rows = [row for row in sizes if row.bytes]
    figure = Plot(figsize=(WIDTH_INCHES, 1.2 + 0.32 * max(len(rows), 1)), layout="constrained")
    if not rows:
        return _empty(figure, "no state holds any bytes")
    axis = figure.add_subplot()
    operators = list(dict.fromkeys(row.operator_id for row in rows))
    labels = [_short(f"{row.operator} / {row.state}") for row in rows]
    colors = [f"C{operators.index(row.operator_id) % 10}" for row in rows]
    positions = range(len(rows))
    scaled, unit = _in_unit([row.bytes for row in rows])
    axis.barh(positions, scaled, color=colors)
    axis.set_yticks(list(positions), labels, **_TEXT)
    axis.invert_yaxis()
    for position, value, row in zip(positions, scaled, rows):
        axis.text(value, position, _bar_label(row.bytes, row.entries), va="center", fontsize=8, **_TEXT)
    axis.margins(x=0.2)
    axis.set_xlabel(unit)
    axis.set_title("state size per operator and state", **_TEXT)
    return figure


def key_group_skew(groups: skew.SizeTable) -> Plot:
    """Entries and bytes per key-group (coloured by subtask) and per subtask (from ``skew.key_group_stats``)."""
    figure = Plot(figsize=(WIDTH_INCHES, 5), layout="constrained")
    figure.suptitle(_short(f"key-group skew: {groups.state} ({groups.operator})"), **_TEXT)
    per_key_group = cast("np.ndarray", figure.subfigures(1, 2, width_ratios=[3, 1]))
    left = per_key_group[0].subplots(2, 1, sharex=True)
    right = per_key_group[1].subplots(2, 1)
    subtasks = skew.subtask_totals(groups)
    for axis, column in zip(left, ("bytes", "entries")):
        values, unit = _in_unit(groups.column(column)) if column == "bytes" else (groups.column(column), column)
        _key_group_bars(axis, groups, values)
        axis.set_ylabel(f"{unit} per key-group")
        _mark_mean(axis, values)
    left[0].legend(loc="upper right", fontsize=7)
    left[1].set_xlabel(f"key-group (max parallelism {groups.max_parallelism}); colour = subtask")
    for axis, column in zip(right, ("bytes", "entries")):
        names = [str(row.subtask) for row in subtasks]
        values, unit = _in_unit(subtasks.column(column)) if column == "bytes" else (subtasks.column(column), column)
        axis.bar(names, values, color=[_subtask_color(row.subtask) for row in subtasks])
        axis.set_ylabel(f"{unit} per subtask")
        _mark_mean(axis, values)
    right[1].set_xlabel(f"subtask (parallelism {groups.parallelism})")
    return figure


def _key_group_bars(axis: Axes, groups: skew.SizeTable, values: list) -> None:
    """One bar per key-group; above ``MAX_BARS`` key-groups one filled step line per subtask (as fast
    to draw for 32768 key-groups as for 128)."""
    if len(values) <= MAX_BARS:
        axis.bar(groups.column("key_group"), values, width=1.0, color=[_subtask_color(row.subtask) for row in groups])
        return
    start = 0
    for end in range(1, len(groups) + 1):
        if end == len(groups) or groups[end].subtask != groups[start].subtask:
            edges = [row.key_group - 0.5 for row in groups[start:end]] + [groups[end - 1].key_group + 0.5]
            axis.stairs(values[start:end], edges, fill=True, color=_subtask_color(groups[start].subtask))
            start = end


def _mark_mean(axis: Axes, values: Sequence[float]) -> None:
    if values:
        mean = sum(values) / len(values)
        axis.axhline(mean, color="black", linewidth=0.8, linestyle="--", label="mean")


def top_keys(keys: skew.SizeTable, *, width: float = WIDTH_INCHES) -> Plot:
    """The largest keys (from ``skew.top_keys``): bytes per key, with their entries."""
    figure = Plot(figsize=(width, 1.2 + 0.3 * max(len(keys), 1)), layout="constrained")
    if not keys:
        return _empty(figure, f"{keys.state} holds no keys")
    axis = figure.add_subplot()
    positions = range(len(keys))
    scaled, unit = _in_unit(keys.column("bytes"))
    axis.barh(positions, scaled, color="C0")
    axis.set_yticks(list(positions), [_short(_key_text(key)) for key in keys.column("key")], **_TEXT)
    axis.invert_yaxis()
    for position, value, row in zip(positions, scaled, keys):
        axis.text(value, position, _bar_label(row.bytes, row.entries), va="center", fontsize=8, **_TEXT)
    axis.margins(x=0.2)
    axis.set_xlabel(unit)
    axis.set_title(_short(f"top {len(keys)} keys of {keys.state} ({keys.operator})"), **_TEXT)
    return figure


def _key_text(key: Any) -> str:
    if isinstance(key, (bytes, bytearray)):
        return "0x" + bytes(key).hex()
    return str(key)


def rescale_preview(groups: skew.SizeTable, parallelism: int, *, width: float = WIDTH_INCHES) -> Plot:
    """Bytes per subtask now and at ``parallelism`` (key-groups assigned as Flink's
    KeyGroupRangeAssignment does), each bar labelled with its key-group range."""
    now = skew.subtask_totals(groups)
    then = skew.rescale_preview(groups, parallelism)
    figure = Plot(figsize=(width, 3.6), layout="constrained")
    figure.suptitle(_short(f"rescale preview: {groups.state} ({groups.operator})"), **_TEXT)
    axes = figure.subplots(1, 2, sharey=True, width_ratios=[max(len(now), 1), max(len(then), 1)])
    _, unit = _in_unit(now.column("bytes"))
    for axis, table, title in (
        (axes[0], now, f"now: parallelism {groups.parallelism}"),
        (axes[1], then, f"at parallelism {parallelism}"),
    ):
        names = [f"{row.subtask}\n{row.first_key_group}-{row.last_key_group}" for row in table]
        values = [v / _UNIT_BYTES[unit] for v in table.column("bytes")]
        axis.bar(names, values, color=[_subtask_color(row.subtask) for row in table])
        _mark_mean(axis, values)
        axis.set_title(title)
        axis.set_xlabel("subtask / key-groups")
        if len(table) > 16:  # too many ranges to read: keep every subtask's number
            axis.set_xticks(range(len(table)), [str(row.subtask) for row in table], fontsize=7)
    axes[0].set_ylabel(f"{unit} per subtask")
    return figure


__all__ = ["Plot", "key_group_skew", "png_bytes", "rescale_preview", "state_sizes", "top_keys"]
