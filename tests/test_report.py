"""Sizes, skew and rescale previews (readers/scans/skew.py), their pictures, the notebook display (HTML
reprs) and `statecat report PATH --html OUT`, checked against the fixtures' expected content; the
pictures' texts name operators, states and keys whole, inside the figure."""

from __future__ import annotations

import base64
import dataclasses
import re
import subprocess
import sys
from collections import Counter

import pytest

from statecat.catalog import plots
from statecat.catalog.report import page
from statecat.catalog.spark.databases import AttachResult
from statecat.readers import SavepointReader, skew
from statecat.readers.keygroups import key_group_for
from statecat.statemeta.errors import LookupFailedError, StatecatError
from statecat.statemeta.model import load_state_meta
from tests.figure_texts import drawn_texts, text_faults, whole
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

EXAMPLE = "sql_groupby_hashmap_2.3"  # accState: 2000 keys, parallelism 2, max parallelism 128
THREAD = "datastream_thread_2.3"  # per_tag: MapState, one entry per (key, tag)
JOIN = "sql_join_2.3"  # parallelism 3, max parallelism 256
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HOSTILE = "<script>alert('x')</script>&"
LONGEST_NAMES = "datastream_thread_1.20"  # the fixtures' longest: operator ids as names, timer states
WINDOW = "sql_window_2.3"
# How Flink names a SQL window aggregation unless table.exec.simplify-operator-name-enabled.
FLINK_SQL_NAME = (
    "GlobalWindowAggregate[4](groupBy=[word], window=[TUMBLE(win_end=[$window_end], size=[1 min])], "
    "select=[word, COUNT(*) AS cnt, SUM(amount) AS total, start('w$) AS window_start, end('w$) AS window_end])"
)


def _expected(case: str, state: str) -> tuple[dict, dict]:
    return next((op, st) for op, st in iter_states(load_expected(case)) if st["name"] == state)


def _flink_key_group_range(index: int, parallelism: int, max_parallelism: int) -> tuple[int, int]:
    """Flink's KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex, written out."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return start, end


def test_key_group_stats_count_every_expected_entry_in_its_key_group():
    op, st = _expected(EXAMPLE, "accState")
    meta = load_state_meta(str(savepoint_dir(EXAMPLE)))
    groups = skew.key_group_stats(meta, "accState")
    assert [row.key_group for row in groups] == list(range(op["max_parallelism"]))
    _, info = meta.find_state("accState")
    expected = Counter(key_group_for(row["key"], info.key, op["max_parallelism"]) for row in st["rows"])
    assert {row.key_group: row.entries for row in groups if row.entries} == dict(expected)
    for row in groups:  # each key-group lies in the range Flink gives its subtask
        first, last = _flink_key_group_range(row.subtask, op["parallelism"], op["max_parallelism"])
        assert first <= row.key_group <= last
        assert (row.bytes > 0) == (row.entries > 0)
    sizes = {r.state: r for r in skew.state_sizes(meta)}
    assert sum(groups.column("bytes")) == sizes["accState"].bytes
    assert sizes["accState"].entries == len(st["rows"])


def test_map_state_entries_are_map_entries_and_top_keys_by_entries():
    _, st = _expected(THREAD, "per_tag")
    reader = SavepointReader(str(savepoint_dir(THREAD)))
    tags = {row["key"]: len(row["value"]) for row in st["rows"]}
    groups = skew.key_group_stats(reader, "per_tag")
    assert sum(groups.column("entries")) == sum(tags.values())
    top = skew.top_keys(reader, "per_tag", n=5, by="entries")
    most = max(tags.values())
    assert len(top) == 5 and top[0].entries == most
    assert all(tags[row.key] == row.entries for row in top)
    assert [row.entries for row in top] == sorted(tags.values(), reverse=True)[:5]
    every = skew.top_keys(reader, "per_tag", n=len(tags))
    assert {row.key: row.entries for row in every} == tags
    assert [row.bytes for row in every] == sorted((row.bytes for row in every), reverse=True)


def test_subtask_totals_and_rescale_preview_follow_flinks_key_group_ranges():
    op, st = _expected(JOIN, "right-records")
    groups = skew.key_group_stats(str(savepoint_dir(JOIN)), "right-records")
    total_entries = sum(len(row["value"]) for row in st["rows"])
    now = skew.subtask_totals(groups)
    assert [row.subtask for row in now] == list(range(op["parallelism"]))
    assert sum(now.column("entries")) == total_entries
    for parallelism in (1, 2, 5, 7, op["max_parallelism"]):
        preview = skew.rescale_preview(groups, parallelism)
        assert [row.subtask for row in preview] == list(range(parallelism))
        for row in preview:
            assert (row.first_key_group, row.last_key_group) == _flink_key_group_range(
                row.subtask, parallelism, op["max_parallelism"]
            )
            assert row.key_groups == row.last_key_group - row.first_key_group + 1
        assert sum(preview.column("entries")) == total_entries
        assert sum(preview.column("bytes")) == sum(groups.column("bytes"))
    for bad in (0, op["max_parallelism"] + 1):
        with pytest.raises(StatecatError, match="max parallelism 256"):
            skew.rescale_preview(groups, bad)


def test_key_group_figures_need_a_keyed_state():
    with pytest.raises(LookupFailedError, match="SourceReaderState"):
        skew.key_group_stats(str(savepoint_dir(EXAMPLE)), "SourceReaderState")
    with pytest.raises(LookupFailedError, match="unknown state"):
        skew.top_keys(str(savepoint_dir(EXAMPLE)), "no-such-state")


def test_tables_convert_to_pandas_with_integer_counts():
    frame = skew.state_sizes(str(savepoint_dir(EXAMPLE))).to_pandas()
    assert list(frame.columns) == ["operator", "operator_id", "state", "kind", "entries", "bytes", "note"]
    accumulators = frame[frame.state == "accState"].iloc[0]
    assert accumulators.entries == 2000 and str(frame.entries.dtype) == "Int64"
    coordinator = frame[frame.state == "_coordinator"].iloc[0]
    assert coordinator.entries is not None and str(coordinator.entries) == "<NA>" and coordinator.bytes > 0


def test_plots_render_as_png():
    reader = SavepointReader(str(savepoint_dir(JOIN)))
    groups = skew.key_group_stats(reader, "left-records")
    figures = [
        plots.state_sizes(skew.state_sizes(reader)),
        plots.key_group_skew(groups),
        plots.top_keys(skew.top_keys(reader, "left-records")),
        plots.rescale_preview(groups, 4),
    ]
    for figure in figures:
        assert figure._repr_png_().startswith(PNG_MAGIC)
    axes = figures[1].axes
    # 256 key-group bars in each per-key-group panel, one bar per subtask beside them.
    assert [len(axis.patches) for axis in axes] == [256, 256, 3, 3]
    assert [text.get_text() for text in figures[3].axes[1].get_xticklabels()] == [
        "0\n0-63",
        "1\n64-127",
        "2\n128-191",
        "3\n192-255",
    ]


def _hostile_meta():
    meta = load_state_meta(str(savepoint_dir(EXAMPLE)))
    op = meta.operators[0]
    state = dataclasses.replace(op.states[0], name=HOSTILE)
    op = dataclasses.replace(op, uid=HOSTILE, states=(state,) + op.states[1:])
    return dataclasses.replace(meta, operators=(op,) + meta.operators[1:])


def test_html_reprs_show_the_savepoint_and_escape_every_value():
    meta = load_state_meta(str(savepoint_dir(EXAMPLE)))
    page = meta._repr_html_()
    for _, st in iter_states(load_expected(EXAMPLE)):
        assert f"<td>{st['name']}</td>" in page
    assert "max parallelism 128" in page
    hostile = _hostile_meta()
    outputs = [hostile._repr_html_(), hostile.operators[0]._repr_html_(), hostile.operators[0].states[0]._repr_html_()]
    for html in outputs:
        assert "<script>" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;" in html


def test_attach_result_display_and_pandas():
    result = AttachResult(
        registered=[],
        known=["orders_a", HOSTILE],
        materialised=["orders_a"],
        failed=[("/sp/broken", f"bad _metadata {HOSTILE}")],
        seconds=0.25,
    )
    html = result._repr_html_()
    assert "0 registered, 2 already known, 1 materialised, 1 failed" in html
    assert "<script>" not in html and html.count("&lt;script&gt;") == 2
    frame = result.to_pandas()
    assert frame.to_dict("records") == [
        {"database": "orders_a", "savepoint": "", "status": "known, materialised", "error": ""},
        {"database": HOSTILE, "savepoint": "", "status": "known", "error": ""},
        {"database": "", "savepoint": "/sp/broken", "status": "failed", "error": f"bad _metadata {HOSTILE}"},
    ]


def _statecat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_report_writes_one_self_contained_page(tmp_path):
    out = tmp_path / "report.html"
    result = _statecat("report", str(savepoint_dir(THREAD)), "--html", str(out), "--parallelism", "3", "--top", "5")
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    # Nothing is fetched: no scripts, stylesheets or images from elsewhere.
    assert not re.search(r"<script|<link|src=\"(?!data:image/png;base64,)", page)
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    keyed = [st for _, st in iter_states(load_expected(THREAD)) if st["kind"] in ("keyed", "timer") and st["rows"]]
    # The sizes picture, then per keyed state with entries: skew, top keys and one rescale preview.
    assert len(images) == 1 + 3 * len(keyed)
    assert all(base64.b64decode(image).startswith(PNG_MAGIC) for image in images)
    for st in keyed:
        assert f"<h3>{st['name']} (keyed-fn)</h3>" in page
    assert "per_tag (keyed-fn): per subtask at parallelism 3 (now 2)" in page
    assert not list(tmp_path.glob(".statecat-report-*"))  # the atomic write left no temp file
    again = _statecat("report", str(savepoint_dir(THREAD)), "--html", str(out), "--max-states", "1")
    assert again.returncode == 0, again.stderr
    assert len(re.findall(r"data:image/png", out.read_text(encoding="utf-8"))) == 1 + 3
    assert f"The 1 largest of {len(keyed)} keyed states" in out.read_text(encoding="utf-8")


def test_report_errors_are_one_line(tmp_path):
    missing_dir = _statecat("report", str(savepoint_dir(EXAMPLE)), "--html", str(tmp_path / "no" / "r.html"))
    assert missing_dir.returncode == 2
    assert missing_dir.stderr.strip().count("\n") == 0 and "cannot write the report" in missing_dir.stderr
    no_savepoint = _statecat("report", str(tmp_path), "--html", str(tmp_path / "r.html"))
    assert no_savepoint.returncode == 2 and no_savepoint.stderr.startswith("statecat: error:")
    assert not (tmp_path / "r.html").exists()


def _named_operator(case: str, operator: str, name: str):
    meta = load_state_meta(str(savepoint_dir(case)))
    ops = tuple(dataclasses.replace(op, uid=None, name=name) if op.label == operator else op for op in meta.operators)
    return dataclasses.replace(meta, operators=ops)


def _report_figures(monkeypatch, meta, **options) -> list[tuple[str, object]]:
    """The report's figures, each with its alt text, as report_html draws them."""
    figures = []
    image = page.image

    def recording(figure, alt):
        figures.append((alt, figure))
        return image(figure, alt)

    monkeypatch.setattr(page, "image", recording)
    page.report_html(meta, **options)
    return figures


@pytest.mark.parametrize(
    ("meta", "max_states"),
    [
        (lambda: load_state_meta(str(savepoint_dir(LONGEST_NAMES))), 10),
        (lambda: _named_operator(WINDOW, "WindowAggregate[4]", FLINK_SQL_NAME), 1),
    ],
    ids=[LONGEST_NAMES, "flink-sql-operator-name"],
)
def test_report_pictures_carry_whole_names_that_fit(monkeypatch, meta, max_states):
    meta = meta()
    sizes = skew.state_sizes(meta)
    shown = sorted((row for row in sizes if row.kind in ("keyed", "timer") and row.entries), key=lambda r: -r.bytes)
    shown = shown[:max_states]
    figures = _report_figures(monkeypatch, meta, max_states=max_states)
    assert len(figures) == 1 + 3 * len(shown)
    texts = {alt: [whole(text) for text, _ in drawn_texts(figure)] for alt, figure in figures}
    for alt, figure in figures:
        assert text_faults(figure) == [], alt
    bars = texts["state size per operator and state"]
    assert all(whole(f"{row.operator} / {row.state}") in bars for row in sizes if row.bytes)
    for row in shown:
        title = f"{row.state} ({row.operator})"
        assert whole(f"key-group skew: {title}") in texts[f"key-group skew of {title}"]
        assert any(re.fullmatch(rf"top\d+keysof{re.escape(whole(title))}", t) for t in texts[f"top keys of {title}"])
        assert whole(f"rescale preview: {title}") in texts[f"rescale preview of {title}"]


def test_long_keys_and_many_subtasks_fit():
    reader = SavepointReader(str(savepoint_dir(EXAMPLE)))
    groups = skew.key_group_stats(reader, "accState")
    unbroken = "k" * 300  # no space or separator to break at: wrapped inside the word
    keys = skew.SizeTable(
        [skew.KeySize(unbroken, 1, 66), skew.KeySize(b"\x00" * 90, 1, 60)],
        skew.KeySize,
        "top keys",
        operator=FLINK_SQL_NAME,
        state="accState",
    )
    figure = plots.top_keys(keys, width=page.SIDE_FIGURE_INCHES)
    assert text_faults(figure) == []
    texts = [whole(text) for text, _ in drawn_texts(figure)]
    assert unbroken in texts and "0x" + "00" * 90 in texts
    for parallelism in (1, groups.max_parallelism):
        figure = plots.rescale_preview(groups, parallelism, width=page.SIDE_FIGURE_INCHES)
        assert text_faults(figure) == [], parallelism
    # 128 key-group ranges side by side cannot be read: the subtasks are numbered instead.
    assert not any(re.fullmatch(r"\d+\n\d+-\d+", text) for text, _ in drawn_texts(figure))
    empty = plots.top_keys(skew.SizeTable([], skew.KeySize, "top keys", state=FLINK_SQL_NAME))
    assert text_faults(empty) == [] and whole(f"{FLINK_SQL_NAME} holds no keys") in [
        whole(text) for text, _ in drawn_texts(empty)
    ]
