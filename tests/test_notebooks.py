"""Every notebook runs offline, top to bottom, in a fresh kernel; the committed copies match their sources.

The notebooks are built from ``notebooks/src/*.py`` by ``notebooks/_build.py`` (which also executes them and
saves their outputs). Deselect with ``-m "not notebooks"``; they run by default.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

pytestmark = pytest.mark.notebooks

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _builder():
    spec = importlib.util.spec_from_file_location("ironmem_notebook_build", NOTEBOOKS / "_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _builder()
SOURCES = build.sources()
EXPECTED = [
    "01_three_rules",
    "02_cache_behaviour",
    "03_tool_schema_budget",
    "04_langchain_dropin",
    "05_llama_index_memory",
    "06_fence_and_scanner",
    "07_real_cache",
]


def test_every_notebook_has_a_source_and_a_built_copy() -> None:
    assert [s.stem for s in SOURCES] == EXPECTED
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_committed_notebook_matches_its_source_and_carries_outputs(source: Path) -> None:
    committed = nbformat.read(str(NOTEBOOKS / f"{source.stem}.ipynb"), as_version=4)
    fresh = build.build_notebook(source)
    assert [(c.cell_type, c.source) for c in committed.cells] == [
        (c.cell_type, c.source) for c in fresh.cells
    ], f"{source.stem}.ipynb is out of date: run `python notebooks/_build.py {source.stem[:2]}`"
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), "saved without running every cell"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot saved"


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_notebook_runs_top_to_bottom(source: Path) -> None:
    nb = build.build_notebook(source)
    try:
        build.execute(nb, cwd=NOTEBOOKS)
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{source.stem} failed:\n{exc}")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
