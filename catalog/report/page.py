"""The catalog layer's HTML: the one-page savepoint report (``statecat report``) and the notebook
display of attach results. Built from ``statecat.statemeta.html`` (escaping, tables) and
``catalog.plots``; the page is self-contained, its pictures inlined as base64 PNG.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import tempfile
from typing import TYPE_CHECKING, Any, cast

from statecat.readers import skew
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.html import STYLE, escape, state_meta_html
from statecat.statemeta.model import StateMeta, load_state_meta

if TYPE_CHECKING:
    from matplotlib.figure import Figure


DEFAULT_TOP_KEYS = 10
DEFAULT_MAX_STATES = 10
SIDE_FIGURE_INCHES = 6.5  # a picture with its table beside it
PAGE_STYLE = (
    "<style>body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;"
    "max-width:1100px;color:#222}h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;"
    "padding-bottom:4px;margin-top:28px}h3{font-size:15px;margin-top:20px}"
    "img{max-width:100%;height:auto;display:block;margin:6px 0}.error{color:#a33}"
    ".row{display:flex;gap:16px;align-items:center}.row>div:first-child{flex:0 1 auto;min-width:0}"
    # A caption naming a long operator wraps, as its picture's title does, rather than widen the page.
    ".statecat caption{overflow-wrap:anywhere}</style>"
)


def image(figure: Figure, alt: str) -> str:
    """A figure as an inline base64 PNG ``<img>``."""
    from statecat.catalog.report.plots import png_bytes

    data = base64.b64encode(png_bytes(figure)).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _side_by_side(picture: str, table_html: str) -> str:
    return f'<div class="row"><div>{picture}</div><div>{table_html}</div></div>'


def default_parallelism(groups: skew.SizeTable) -> int:
    """The rescale a report previews when none is asked for: twice the parallelism, at most the max."""
    # A key_group_stats table carries both.
    return min(cast(int, groups.parallelism) * 2, cast(int, groups.max_parallelism))


def _keyed_section(meta: StateMeta, row: skew.StateSize, top: int, parallelisms: list[int]) -> str:
    from statecat.catalog.report import plots

    title = f"{row.state} ({row.operator})"
    parts = [f"<h3>{escape(title)}</h3>"]
    try:
        groups = skew.key_group_stats(meta, row.state, row.operator_id)
        keys = skew.top_keys(meta, row.state, row.operator_id, n=top)
    except StatecatError as exc:
        return parts[0] + f'<p class="error">{escape(exc)}</p>'
    parts.append(image(plots.key_group_skew(groups), f"key-group skew of {title}"))
    parts.append(skew.subtask_totals(groups)._repr_html_())
    parts.append(
        _side_by_side(image(plots.top_keys(keys, width=SIDE_FIGURE_INCHES), f"top keys of {title}"), keys._repr_html_())
    )
    for parallelism in parallelisms or [default_parallelism(groups)]:
        try:
            preview = skew.rescale_preview(groups, parallelism)
        except StatecatError as exc:
            parts.append(f'<p class="error">{escape(exc)}</p>')
            continue
        parts.append(
            _side_by_side(
                image(
                    plots.rescale_preview(groups, parallelism, width=SIDE_FIGURE_INCHES), f"rescale preview of {title}"
                ),
                preview._repr_html_(),
            )
        )
    return "".join(parts)


def report_html(
    savepoint: str | StateMeta,
    *,
    top: int = DEFAULT_TOP_KEYS,
    parallelisms: list[int] | None = None,
    max_states: int = DEFAULT_MAX_STATES,
) -> str:
    """The report page of one savepoint: its StateMeta, state sizes, and for its largest keyed states
    key-group skew, top keys and a rescale preview."""
    from statecat.catalog.report import plots

    meta = savepoint if isinstance(savepoint, StateMeta) else load_state_meta(savepoint)
    sizes = skew.state_sizes(meta)
    # Native RocksDB states know their bytes but not their entries (state_bytes): they count too.
    keyed = sorted(
        (
            row
            for row in sizes
            if row.kind in ("keyed", "timer") and (row.entries or (row.entries is None and row.bytes))
        ),
        key=lambda row: -(row.bytes or 0),
    )
    shown = keyed[:max_states]
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>statecat report: {escape(meta.path)}'
        f"</title>{PAGE_STYLE}{STYLE}</head><body>",
        f'<h1>statecat report</h1><p>{escape(meta.path)}<br><span class="note">checkpoint '
        f"{escape(meta.checkpoint_id)}; generated {escape(generated)}</span></p>",
        "<h2>Operators and states</h2>",
        state_meta_html(meta),
        "<h2>State sizes</h2>",
        image(plots.state_sizes(sizes), "state size per operator and state"),
        sizes._repr_html_(),
        "<h2>Keyed states</h2>",
    ]
    if not keyed:
        parts.append('<p class="note">No keyed state holds entries.</p>')
    if len(keyed) > len(shown):
        parts.append(
            f'<p class="note">The {len(shown)} largest of {len(keyed)} keyed states with entries '
            f"(more with --max-states).</p>"
        )
    parts.extend(_keyed_section(meta, row, top, parallelisms or []) for row in shown)
    parts.append("</body></html>")
    return "".join(parts)


def write_report(savepoint: str | StateMeta, out: str, **options: Any) -> str:
    """Writes the report page to ``out``; returns ``out``."""
    return write_page(report_html(savepoint, **options), out)


def write_page(page: str, out: str) -> str:
    """Writes an HTML page atomically (a reader never sees half a page); returns ``out``."""
    directory = os.path.dirname(os.path.abspath(out))
    fd, temp = tempfile.mkstemp(prefix=".statecat-report-", suffix=".html", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp's private 0600 is not what a report needs
        os.replace(temp, out)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return out


__all__ = ["report_html", "write_page", "write_report"]
