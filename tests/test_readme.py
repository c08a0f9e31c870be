"""Every Python block of README.md runs as written, in a fresh interpreter and a fresh folder, offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_an_example_per_framework() -> None:
    text = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 3
    assert "create_agent" in text and "FunctionAgent" in text and "MemoryManager" in text


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_block_runs(number: int, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "IRONMEM_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, "-c", BLOCKS[number]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"README block {number} failed:\n{BLOCKS[number]}\n{result.stderr[-3000:]}"


def test_readme_links_point_at_files() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)", text):
        if "://" not in target:
            assert (REPO / target).exists(), f"README links to a missing file: {target}"
