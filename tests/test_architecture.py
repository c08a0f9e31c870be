"""The core never imports a framework: checked with import-linter's contract from pyproject.toml,
and by importing the core in a fresh interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_contract_holds() -> None:
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is not installed: pip install -e '.[dev]'"
    result = subprocess.run([exe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_importing_ironmem_loads_no_framework() -> None:
    code = (
        "import sys, ironmem, ironmem.core.manager;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'langchain','langchain_core','llama_index','langgraph'});"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
