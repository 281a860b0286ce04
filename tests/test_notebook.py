"""sql_examples/debug_one_key.ipynb runs as a new user runs it (a real Jupyter kernel, from the
sql_examples directory, on the bundled example savepoint, and pointed at another state), without
errors or warnings, and shows the values the fixture's expected.json holds, in pictures whose names
are whole and fit."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from statecat.statemeta.model import load_state_meta
from tests.figure_texts import drawn_texts, text_faults, whole
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

NOTEBOOK = Path(__file__).resolve().parents[1] / "sql_examples" / "debug_one_key.ipynb"
CASE = "sql_groupby_hashmap_2.3"  # the notebook's default SAVEPOINT
KEY = "key_662"
# Elsewhere: a Java POJO's fields by name, where the default's SQL accumulators are f0 and f1.
OTHER_CASE, OTHER_STATE, OTHER_KEY = "datastream_java_pojo_2.3", "summary", "k_87"


def _run(figures: Path, **environment: str) -> tuple[list, list]:
    """The notebook's code cells, run in a real kernel, and the figures its cells returned."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Run after the notebook's cells and taken out again: hands the test the figures (IPython's Out).
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            "import pickle\nfrom matplotlib.figure import Figure\n"
            f"with open({str(figures)!r}, 'wb') as out:\n"
            "    pickle.dump([value for value in Out.values() if isinstance(value, Figure)], out)"
        )
    )
    # Raises CellExecutionError on the first cell that fails.
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute(env={**os.environ, **environment})
    notebook.cells.pop()
    with open(figures, "rb") as f:
        return [cell for cell in notebook.cells if cell.cell_type == "code"], pickle.load(f)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("notebook") / "figures.pickle")


@pytest.fixture(scope="module")
def executed(run):
    return run[0]


def _texts(cells, mime: str) -> list[str]:
    return [output.get("data", {}).get(mime, "") for cell in cells for output in cell.outputs]


def test_notebook_runs_clean(executed):
    _assert_clean(executed)


def _assert_clean(executed) -> None:
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
    printed = _printed(executed)
    assert f"{KEY}: f0 {value['f0']}, f1 {value['f1']}" in printed  # the state's own field names
    assert "1 key-group read" in printed
    frame = next(page for page in _texts(executed, "text/html") if "dataframe" in page and KEY in page)
    assert f"<td>{KEY}</td>" in frame and f"<td>{value}</td>" in frame  # pandas' HTML of to_pandas()
    # The Spark cell: statecat.key_view through statecat.catalog.session(), a Spark Connect client of
    # the home's server, started in the background for the notebook.
    spark_frame = _texts(executed, "text/html")[-1]
    assert "<th>state</th>" in spark_frame and "<td>accState</td>" in spark_frame, spark_frame
    assert f"{value['f0']}" in spark_frame and f"{value['f1']}" in spark_frame
    from statecat.catalog.servers.thrift_server import read_server_info

    server = read_server_info(os.environ["STATECAT_HOME"])
    assert server is not None and server.connect_port is not None  # the session was a client of this server


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


def _printed(executed) -> str:
    return "".join(output.text for cell in executed for output in cell.outputs if output.output_type == "stream")


def _assert_whole_names(figures, case: str, state: str) -> None:
    """The notebook's four pictures name the state and its operator whole, and every text fits."""
    meta = load_state_meta(str(savepoint_dir(case)))
    operator, _ = meta.find_state(state)
    title = f"{state} ({operator.label})"
    texts = [{whole(text) for text, _ in drawn_texts(figure)} for figure in figures]
    assert len(figures) == 4  # sizes, key-group skew, top keys, rescale preview
    assert whole(f"{operator.label} / {state}") in texts[0]
    assert whole(f"key-group skew: {title}") in texts[1]
    assert whole(f"top 10 keys of {title}") in texts[2]
    assert whole(f"rescale preview: {title}") in texts[3]
    assert [text_faults(figure) for figure in figures] == [[]] * 4


def test_notebook_plots_carry_whole_names(run):
    _assert_whole_names(run[1], CASE, "accState")


def test_notebook_pointed_at_another_state_labels_its_fields(tmp_path):
    executed, figures = _run(
        tmp_path / "figures.pickle",
        STATECAT_EXAMPLE_SAVEPOINT=str(savepoint_dir(OTHER_CASE)),
        STATECAT_EXAMPLE_STATE=OTHER_STATE,
        STATECAT_EXAMPLE_KEY=OTHER_KEY,
    )
    _assert_clean(executed)
    _, st = next((op, st) for op, st in iter_states(load_expected(OTHER_CASE)) if st["name"] == OTHER_STATE)
    value = next(row["value"] for row in st["rows"] if row["key"] == OTHER_KEY)
    line = next(line for line in _printed(executed).splitlines() if line.startswith(f"{OTHER_KEY}: "))
    fields = line.removeprefix(f"{OTHER_KEY}: ").split(", ")
    assert sorted(fields) == sorted(f"{name} {field}" for name, field in value.items())
    _assert_whole_names(figures, OTHER_CASE, OTHER_STATE)


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
