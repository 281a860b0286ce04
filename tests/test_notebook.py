"""sql_examples/debug_one_key.ipynb runs as a new user runs it (a real Jupyter kernel, from the
sql_examples directory, on the bundled example savepoint), without errors or warnings, and shows
the values the fixture's expected.json holds."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.fixtures.expected import iter_states, load_expected

NOTEBOOK = Path(__file__).resolve().parents[1] / "sql_examples" / "debug_one_key.ipynb"
CASE = "sql_groupby_hashmap_2.3"  # the notebook's default SAVEPOINT
KEY = "key_662"


@pytest.fixture(scope="module")
def executed():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Raises CellExecutionError on the first cell that fails.
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _texts(cells, mime: str) -> list[str]:
    return [output.get("data", {}).get(mime, "") for cell in cells for output in cell.outputs]


def test_notebook_runs_clean(executed):
    kinds = [output.output_type for cell in executed for output in cell.outputs]
    assert "error" not in kinds
    streams = [
        (output.name, output.text) for cell in executed for output in cell.outputs if output.output_type == "stream"
    ]
    assert all(name == "stdout" for name, _ in streams), streams
    everything = "\n".join(text for _, text in streams) + "\n".join(_texts(executed, "text/plain"))
    assert "Warning" not in everything and "warning" not in everything
    assert all(cell.outputs for cell in executed), "every cell shows something"


def test_notebook_shows_the_expected_key(executed):
    expected = load_expected(CASE)
    _, accumulators = next((op, st) for op, st in iter_states(expected) if st["name"] == "accState")
    value = next(row["value"] for row in accumulators["rows"] if row["key"] == KEY)
    printed = "".join(output.text for cell in executed for output in cell.outputs if output.output_type == "stream")
    assert f"{KEY}: count {value['f0']}, total {value['f1']}" in printed
    assert "1 key-group read" in printed
    frame = next(page for page in _texts(executed, "text/html") if "dataframe" in page and KEY in page)
    assert f"<td>{KEY}</td>" in frame and f"<td>{value}</td>" in frame  # pandas' HTML of to_pandas()


def test_notebook_shows_state_meta_sizes_and_plots(executed):
    expected = load_expected(CASE)
    pages = _texts(executed, "text/html")
    state_meta = pages[0]
    for _, st in iter_states(expected):
        assert f"<td>{st['name']}</td>" in state_meta
    sizes = next(page for page in pages if "state sizes of" in page)
    rows = len(next(st for _, st in iter_states(expected) if st["name"] == "accState")["rows"])
    assert f'<td>accState</td><td>keyed</td><td class="num">{rows}</td>' in sizes
    images = [png for png in _texts(executed, "image/png") if png]
    assert len(images) == 4  # sizes, key-group skew, top keys, rescale preview
    preview = next(page for page in pages if "per subtask at parallelism 4 (now 2)" in page)
    assert preview.count("<tr>") == 1 + 4


@pytest.mark.spark
def test_spark_in_a_notebook_cell_is_quiet(tmp_path):
    """session() under IPython turns Spark's console progress bars off, and toPandas() runs with
    the pinned pandas without PySpark's FutureWarning."""
    cell = nbformat.v4.new_code_cell(
        "import statecat.catalog\n"
        f"spark = statecat.catalog.session({str(tmp_path / 'home')!r})\n"
        "print('progress', spark.conf.get('spark.ui.showConsoleProgress'))\n"
        "spark.range(3).toPandas()"
    )
    notebook = nbformat.v4.new_notebook(cells=[cell])
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = notebook.cells[0].outputs
    streams = [(output.name, output.text) for output in outputs if output.output_type == "stream"]
    assert streams == [("stdout", "progress false\n")]
    result = next(output for output in outputs if output.output_type == "execute_result")
    assert "<td>2</td>" in result.data["text/html"]  # the DataFrame of rows 0, 1, 2
