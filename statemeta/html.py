"""HTML for notebooks: the rich display (``_repr_html_``) of StateMeta, its operators and states,
and the escaped table every layer's HTML is built from.

Every value goes through ``escape``: state names, uids and type descriptions come from the
savepoint, so they are untrusted text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta

# Rows a notebook table shows before it says how many it left out.
MAX_HTML_ROWS = 50
STYLE = (
    "<style>.statecat table{border-collapse:collapse;margin:4px 0 10px 0;font-size:12px}"
    ".statecat th,.statecat td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    ".statecat th{background:#f2f2f2}.statecat caption{text-align:left;font-weight:bold;padding:2px 0}"
    ".statecat td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".statecat .raw{color:#a33}.statecat .note{color:#666}</style>"
)


def escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def size_text(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence],
    *,
    caption: str | None = None,
    numeric: Iterable[str] = (),
    max_rows: int | None = MAX_HTML_ROWS,
) -> str:
    """An HTML table of escaped cells; ``numeric`` columns align right."""
    numeric = set(numeric)
    parts = ["<table>"]
    if caption:
        parts.append(f"<caption>{escape(caption)}</caption>")
    parts.append("<tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>")
    shown = 0
    total = 0
    for row in rows:
        total += 1
        if max_rows is not None and shown >= max_rows:
            continue
        shown += 1
        cells = []
        for column, value in zip(columns, row):
            css = ' class="num"' if column in numeric else ""
            cells.append(f"<td{css}>{escape(value)}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</table>")
    if total > shown:
        parts.append(f'<div class="note">{total - shown} more rows not shown (of {total})</div>')
    return "".join(parts)


def block(body: str) -> str:
    """A fragment with statecat's table style, for one notebook output or one report section."""
    return f'<div class="statecat">{STYLE}{body}</div>'


STATE_COLUMNS = ("state", "kind", "key", "namespace", "value", "decode", "subtasks")


def _state_row(state: StateInfo) -> tuple[str, ...]:
    kind = state.kind + (f" {state.state_type}" if state.state_type else "")
    decode = "full" if state.decode_status == "full" else "raw: " + "; ".join(state.raw_reasons)
    subtasks = sorted({loc.subtask for loc in state.locations if loc.subtask is not None})
    return (
        state.name,
        kind,
        state.key.describe() if state.key else "",
        state.namespace.describe() if state.namespace else "",
        state.value.describe(),
        decode,
        ", ".join(map(str, subtasks)) or "-",
    )


def _operator_heading(op: OperatorMeta) -> str:
    names = escape(op.label) + (
        f' <span class="note">(name {escape(op.name)})</span>' if op.name and op.uid and op.name != op.uid else ""
    )
    # States of one operator share their subtasks' streams: the size is the operator's.
    streams = {(loc.subtask, loc.stream) for state in op.states for loc in state.locations}
    stored = sum(stream.size for _, stream in streams)
    return (
        f'<div><b>operator {names}</b> <span class="note">id {escape(op.id)}, parallelism '
        f"{escape(op.parallelism)}, max parallelism {escape(op.max_parallelism)}, "
        f"state streams {escape(size_text(stored))}</span></div>"
    )


def _operator_body(op: OperatorMeta) -> str:
    parts = [_operator_heading(op)]
    for reason in op.unsupported:
        parts.append(f'<div class="raw">not readable: {escape(reason)}</div>')
    if op.states:
        parts.append(table(STATE_COLUMNS, [_state_row(s) for s in op.states], max_rows=None))
    else:
        parts.append('<div class="note">(no state)</div>')
    return "".join(parts)


def state_meta_html(meta: StateMeta) -> str:
    md = meta.metadata
    states = sum(len(op.states) for op in meta.operators)
    head = (
        f"<div><b>savepoint</b> {escape(meta.path)}</div>"
        f'<div class="note">checkpoint {escape(md.checkpoint_id)}, '
        f"{escape(md.checkpoint_type or 'type not recorded')}, format {escape(md.savepoint_format or '-')}, "
        f"_metadata v{escape(md.version)}; {len(meta.operators)} operators, {states} states</div>"
    )
    return block(head + "".join(_operator_body(op) for op in meta.operators))


def operator_html(op: OperatorMeta) -> str:
    return block(_operator_body(op))


def state_html(state: StateInfo) -> str:
    return block(table(STATE_COLUMNS, [_state_row(state)]))
