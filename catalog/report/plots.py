"""Pictures of a savepoint's state (matplotlib): sizes per operator and state, key-group skew,
the largest keys, and a rescale preview. The numbers come from ``statecat.readers.scans.skew``.

    from statecat.readers import SavepointReader, skew
    from statecat.catalog import plots

    reader = SavepointReader(path)
    plots.state_sizes(skew.state_sizes(reader))
    groups = skew.key_group_stats(reader, "accState")
    plots.key_group_skew(groups)
    plots.top_keys(skew.top_keys(reader, "accState", n=10))
    plots.rescale_preview(groups, parallelism=4)

Each function returns a matplotlib ``Figure`` (no pyplot, so no GUI backend and no global figure
state); a notebook displays it as PNG, ``png_bytes`` renders it for a report. Names (operators,
states, keys) are drawn whole, wrapped to the room they have; sizes sit in a column the layout makes
room for, right of the bars.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path
from matplotlib.ticker import MaxNLocator

from statecat.readers import skew
from statecat.statemeta.html import size_text

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes

# Text from the savepoint (state names, keys) may hold "$": never read it as mathtext.
_TEXT: dict[str, Any] = {"parse_math": False}
WIDTH_INCHES = 10
LABEL_SHARE = 0.4  # of a figure's width, at most, for the names beside its bars
VALUE_FONT_SIZE = 8
MAX_BARS = 1024
_UNIT_BYTES = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
# Text is measured unhinted; the PNG renderer hints it and draws it up to ~8% wider at 100 dpi.
_HINTING_SLACK = 0.88
_TITLE_MARGIN_INCHES = 0.2  # the layout's padding either side of a figure's title
# Where a line may end, best first: after a space; inside a word, after a separator or before a bracket.
_BREAKS = (re.compile(r"(?<=\s)"), re.compile(r"(?<=[/,;:=_.\-])|(?=[(\[])"))
_FigureT = TypeVar("_FigureT", bound=Figure)


class Plot(Figure):
    """A Figure that notebooks show as PNG even when matplotlib's inline backend is not active."""

    def _repr_png_(self) -> bytes:
        return png_bytes(self)


def png_bytes(figure: Figure, dpi: int = 100) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=dpi)
    return out.getvalue()


def _inches(text: str, size: float | str) -> float:
    """How wide ``text`` (one line) is drawn in font ``size``, in inches."""
    return text_to_path.get_text_width_height_descent(text, FontProperties(size=size), ismath=False)[0] / 72


def _fits(text: str, width: float, size: float | str) -> bool:
    return _inches(text, size) <= width * _HINTING_SLACK


def _wrap(text: object, width: float, size: float | str) -> str:
    """``text`` whole, in lines no wider than ``width`` inches in font ``size``: broken after spaces,
    a word wider than a line after its separators, and one without any between its characters."""
    lines = (line.rstrip() for paragraph in str(text).split("\n") for line in _wrap_line(paragraph, width, size))
    return "\n".join(lines)


def _wrap_line(text: str, width: float, size: float | str, level: int = 0) -> list[str]:
    """Lines, each with the spaces it ends in (the caller strips them once the line is done)."""
    if level == len(_BREAKS):
        return _cut(text, width, size)
    lines: list[str] = []
    line = ""
    for piece in _BREAKS[level].split(text):
        if _fits((line + piece).rstrip(), width, size):
            line += piece
            continue
        if line.strip():
            lines.append(line)
        *full, line = _wrap_line(piece, width, size, level + 1) if not _fits(piece.rstrip(), width, size) else [piece]
        lines.extend(full)
    return [*lines, line]


def _cut(text: str, width: float, size: float | str) -> list[str]:
    """A word with nowhere to break, cut into lines between its characters."""
    lines = []
    while not _fits(text.rstrip(), width, size):
        cut = _longest_fitting_prefix(text, width, size)
        lines.append(text[:cut])
        text = text[cut:]
    return [*lines, text]


def _longest_fitting_prefix(text: str, width: float, size: float | str) -> int:
    low, high = 1, len(text)  # at least one character per line, however narrow the room
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _fits(text[:middle], width, size) else (low, middle - 1)
    return low


def _line_inches(size: float | str) -> float:
    return FontProperties(size=size).get_size_in_points() * 1.25 / 72


def _bar_row_inches(labels: Sequence[str]) -> float:
    """Height of one bar's row: room for the most lines a bar's name was wrapped to."""
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    return max(0.3, 0.1 + lines * _line_inches(rcParams["ytick.labelsize"]))


def _suptitle(figure: Figure, text: str) -> None:
    width = figure.get_figwidth() - 2 * _TITLE_MARGIN_INCHES
    figure.suptitle(_wrap(text, width, rcParams["figure.titlesize"]), **_TEXT)


def _subtask_color(subtask: int) -> str:
    return f"C{subtask % 10}"


def _in_unit(values: Sequence[float]) -> tuple[list[float], str]:
    """Byte counts in the binary unit of the largest, so that the axis ticks are round numbers."""
    top = max(values, default=0)
    unit = next((u for u, size in _UNIT_BYTES.items() if top < 1024 * size), "GiB")
    return [v / _UNIT_BYTES[unit] for v in values], unit


def _bar_label(size: int, entries: int | None) -> str:
    label = size_text(size)
    return label if entries is None else f"{label}, {entries:,} entr{'y' if entries == 1 else 'ies'}"


def _empty(figure: _FigureT, message: str) -> _FigureT:
    text = _wrap(message, figure.get_figwidth() - 2 * _TITLE_MARGIN_INCHES, rcParams["font.size"])
    figure.text(0.5, 0.5, text, ha="center", va="center", **_TEXT)
    return figure


def _bars(axis: Axes, names: list[str], values: list[float], sizes: list[str], **style: Any) -> None:
    """Horizontal bars, top to bottom, named on the left; each bar's size is a tick label of a second
    y axis on the right, so the layout makes room for it and no size is cut at the figure's edge."""
    positions = list(range(len(names)))
    axis.barh(positions, values, **style)
    axis.set_yticks(positions, names, **_TEXT)
    axis.invert_yaxis()
    right = axis.secondary_yaxis("right", functions=(_same, _same))
    right.set_yticks(positions, sizes, fontsize=VALUE_FONT_SIZE, **_TEXT)
    right.tick_params(length=0)


def _same(values: Any) -> Any:
    """The second y axis's positions are the bars' (a module function: the figure stays picklable)."""
    return values


def _bar_figure(names: list[str], width: float) -> Plot:
    """A figure tall enough for one row per bar name, however many lines the names were wrapped to."""
    return Plot(figsize=(width, 1.4 + _bar_row_inches(names) * max(len(names), 1)), layout="constrained")


def state_sizes(sizes: skew.SizeTable) -> Plot:
    """Bytes of every state (from ``skew.state_sizes``), one bar each, grouped by operator."""
    rows = [row for row in sizes if row.bytes]
    room = WIDTH_INCHES * LABEL_SHARE
    names = [_wrap(f"{row.operator} / {row.state}", room, rcParams["ytick.labelsize"]) for row in rows]
    figure = _bar_figure(names, WIDTH_INCHES)
    if not rows:
        return _empty(figure, "no state holds any bytes")
    axis = figure.add_subplot()
    operators = list(dict.fromkeys(row.operator_id for row in rows))
    scaled, unit = _in_unit([row.bytes for row in rows])
    sizes_text = [_bar_label(row.bytes, row.entries) for row in rows]
    _bars(axis, names, scaled, sizes_text, color=[f"C{operators.index(row.operator_id) % 10}" for row in rows])
    axis.set_xlabel(unit)
    axis.set_title("state size per operator and state", **_TEXT)
    return figure


def key_group_skew(groups: skew.SizeTable) -> Plot:
    """Entries and bytes per key-group (coloured by subtask) and per subtask (from ``skew.key_group_stats``)."""
    figure = Plot(figsize=(WIDTH_INCHES, 5), layout="constrained")
    _suptitle(figure, f"key-group skew: {groups.state} ({groups.operator})")
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
        values, unit = _in_unit(subtasks.column(column)) if column == "bytes" else (subtasks.column(column), column)
        axis.bar(subtasks.column("subtask"), values, color=[_subtask_color(row.subtask) for row in subtasks])
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # as many subtask numbers as fit
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
    names = [_wrap(_key_text(key), width * LABEL_SHARE, rcParams["ytick.labelsize"]) for key in keys.column("key")]
    figure = _bar_figure(names, width)
    if not keys:
        return _empty(figure, f"{keys.state} holds no keys")
    _suptitle(figure, f"top {len(keys)} keys of {keys.state} ({keys.operator})")
    axis = figure.add_subplot()
    scaled, unit = _in_unit(keys.column("bytes"))
    _bars(axis, names, scaled, [_bar_label(row.bytes, row.entries) for row in keys], color="C0")
    axis.set_xlabel(unit)
    return figure


def _key_text(key: Any) -> str:
    if isinstance(key, (bytes, bytearray)):
        return "0x" + bytes(key).hex()
    return str(key)


def rescale_preview(groups: skew.SizeTable, parallelism: int, *, width: float = WIDTH_INCHES) -> Plot:
    """Bytes per subtask now and at ``parallelism`` (key-groups assigned as Flink's
    KeyGroupRangeAssignment does), each bar labelled with its key-group range where the labels fit."""
    now = skew.subtask_totals(groups)
    then = skew.rescale_preview(groups, parallelism)
    figure = Plot(figsize=(width, 3.6), layout="constrained")
    _suptitle(figure, f"rescale preview: {groups.state} ({groups.operator})")
    # Panels as wide as their subtasks are many, but neither under a quarter of the other.
    bars = max(len(now), len(then), 1)
    axes = figure.subplots(1, 2, sharey=True, width_ratios=[max(len(now), bars / 4), max(len(then), bars / 4)])
    _, unit = _in_unit(now.column("bytes"))
    for axis, table in zip(axes, (now, then)):
        values = [v / _UNIT_BYTES[unit] for v in table.column("bytes")]
        axis.bar(table.column("subtask"), values, color=[_subtask_color(row.subtask) for row in table])
        _mark_mean(axis, values)
    axes[0].set_ylabel(f"{unit} per subtask")
    figure.draw_without_rendering()  # lays the panels out: their widths decide how their texts fit
    for axis, table, title in (
        (axes[0], now, f"now: parallelism {groups.parallelism}"),
        (axes[1], then, f"at parallelism {parallelism}"),
    ):
        room = axis.get_window_extent().width / figure.dpi
        axis.set_title(_wrap(title, room, rcParams["axes.titlesize"]))
        ranges = [f"{row.subtask}\n{row.first_key_group}-{row.last_key_group}" for row in table]
        widest = max(_inches(line, rcParams["xtick.labelsize"]) for label in ranges for line in label.split("\n"))
        if widest * 1.5 * len(ranges) <= room * _HINTING_SLACK:  # each label with half its width to spare
            axis.set_xticks(table.column("subtask"), ranges)
            axis.set_xlabel(_wrap("subtask / key-groups", room, rcParams["axes.labelsize"]))
        else:  # too many ranges to read: as many subtask numbers as fit
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
            axis.set_xlabel(_wrap("subtask", room, rcParams["axes.labelsize"]))
    return figure


__all__ = ["Plot", "key_group_skew", "png_bytes", "rescale_preview", "state_sizes", "top_keys"]
