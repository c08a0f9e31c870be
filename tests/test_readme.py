"""The README: an example per framework, short, links that resolve (its blocks run in tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_an_example_per_framework() -> None:
    text = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 3
    assert "create_agent" in text and "FunctionAgent" in text and "MemoryManager" in text


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


# Every block runs as written, with the docs' blocks: tests/test_docs.py.


def test_readme_links_point_at_files() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)", text):
        if "://" not in target:
            assert (REPO / target).exists(), f"README links to a missing file: {target}"
