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
    assert "2 kept, 0 broken" in result.stdout  # no framework in the core; the core imports no provider/adapter


def test_importing_ironmem_loads_no_framework() -> None:
    code = (
        "import sys, ironmem, ironmem.core.manager;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'langchain','langchain_core','llama_index','langgraph'});"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_exception_ironmem_defines_derives_from_ironmemerror() -> None:
    """One error tree: ``except IronMemError`` catches anything ironmem raises on purpose."""
    import importlib
    import inspect
    import pkgutil

    import ironmem
    from ironmem.core.errors import IronMemError

    optional = ("langchain", "llama_index", "mem0", "local_vector", "hindsight", "openviking", "honcho",
                "supermemory", "postgres", "local")
    strays = []
    for info in pkgutil.walk_packages(ironmem.__path__, "ironmem."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            assert any(part in info.name for part in optional), f"{info.name} failed to import"
            continue
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
                    and not issubclass(obj, IronMemError)):
                strays.append(f"{module.__name__}.{name}")
    assert strays == [], f"exceptions outside the IronMemError tree: {strays}"


def test_errors_are_defined_once() -> None:
    """A class name of the error tree is defined in exactly one module."""
    import subprocess as sp

    out = sp.run(["grep", "-rhoE", r"^class [A-Za-z]+(Error|Violation)\b", str(REPO / "ironmem")],
                 capture_output=True, text=True).stdout.split("\n")
    names = [line.split()[1] for line in out if line]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
