"""Build the notebooks from their sources and execute them, saving outputs and plots.

Each notebook is written as a plain Python script in ``notebooks/src/NN_name.py`` using the "percent" cell format
(``# %%`` starts a code cell, ``# %% [markdown]`` a markdown cell whose lines start with ``# ``). This script turns
each source into ``notebooks/NN_name.ipynb`` with nbformat and runs it top to bottom with nbclient, so the saved
notebook carries real outputs.

Usage (from the repository root)::

    python notebooks/_build.py              # every notebook
    python notebooks/_build.py 02 03        # the notebooks whose names start with 02 or 03
    python notebooks/_build.py --no-execute # rebuild cells only (drops outputs)

The kernel is the Python running this script (a temporary kernelspec points at ``sys.executable``), so the
notebooks see the same installed ``ironmem``. Offline without ``TIKTOKEN_CACHE_DIR`` they run on labelled token
estimates; set it (see the README) before saving the committed copies, which carry exact figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
KERNEL_NAME = "ironmem-python"
#: Per-cell timeout in seconds; every notebook is meant to finish well under 30 s in total.
CELL_TIMEOUT = 120

KERNELSPEC_METADATA = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def sources() -> list[Path]:
    """The notebook sources, in order."""
    return sorted(SRC.glob("[0-9][0-9]_*.py"))


def parse_cells(text: str) -> list[tuple[str, str]]:
    """Split a percent-format script into ``(kind, source)`` cells; kind is "code" or "markdown"."""
    cells: list[tuple[str, list[str]]] = []
    kind: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# %%"):
            if kind is not None:
                cells.append((kind, lines))
            kind = "markdown" if "[markdown]" in stripped else "code"
            lines = []
            continue
        if kind is None:
            if stripped:  # text before the first marker (e.g. a module docstring) is not part of the notebook
                continue
            continue
        lines.append(line)
    if kind is not None:
        cells.append((kind, lines))
    out: list[tuple[str, str]] = []
    for kind, body in cells:
        while body and not body[0].strip():
            body = body[1:]
        while body and not body[-1].strip():
            body = body[:-1]
        if kind == "markdown":
            body = [ln[2:] if ln.startswith("# ") else ln.removeprefix("#") for ln in body]
        if body:
            out.append((kind, "\n".join(body)))
    return out


def build_notebook(source: Path) -> nbformat.NotebookNode:
    """The unexecuted notebook for ``source``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC_METADATA)
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, text) in enumerate(parse_cells(source.read_text(encoding="utf-8"))):
        cell = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        cell["id"] = f"{source.stem[:2]}-{i:03d}"
        nb.cells.append(cell)
    return nb


@contextmanager
def kernelspec_for_this_python() -> Iterator[str]:
    """A temporary kernelspec that runs ``sys.executable -m ipykernel_launcher``; yields its name."""
    with tempfile.TemporaryDirectory(prefix="ironmem-kernel-") as tmp:
        spec_dir = Path(tmp) / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ironmem)",
            "language": "python",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = tmp + (os.pathsep + old if old else "")
        try:
            yield KERNEL_NAME
        finally:
            if old is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = old


def execute(
    nb: nbformat.NotebookNode, *, cwd: Path = HERE, timeout: int = CELL_TIMEOUT
) -> nbformat.NotebookNode:
    """Run ``nb`` top to bottom in a fresh kernel of this Python; raises ``CellExecutionError`` on any error."""
    from nbclient import NotebookClient

    with kernelspec_for_this_python() as kernel_name:
        client = NotebookClient(
            nb,
            kernel_name=kernel_name,
            timeout=timeout,
            resources={"metadata": {"path": str(cwd)}},
            record_timing=False,
            allow_errors=False,
        )
        client.execute()
    nb.metadata["kernelspec"] = dict(KERNELSPEC_METADATA)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="build only notebooks whose names start with these prefixes")
    parser.add_argument("--no-execute", action="store_true", help="write the cells without running them")
    args = parser.parse_args(argv)
    chosen = [s for s in sources() if not args.only or any(s.stem.startswith(p) for p in args.only)]
    if not chosen:
        print("no notebook source matches", args.only, file=sys.stderr)
        return 2
    for source in chosen:
        nb = build_notebook(source)
        start = time.perf_counter()
        if not args.no_execute:
            execute(nb)
        target = HERE / f"{source.stem}.ipynb"
        nbformat.write(nb, str(target))
        print(f"{target.name}: {len(nb.cells)} cells, {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
