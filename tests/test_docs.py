"""Every Python block of the README and of docs/ runs as written: in a fresh interpreter, in a fresh folder (which
is also ``HOME``, so ``~/.ironmem`` lands there), offline, with no API key.

A block that cannot run here says so with an HTML comment on the line before it (invisible on the rendered page):

- ``<!-- docs-test: requires MODULE[, MODULE] -->``: runs when those modules import; skipped, naming them, when
  an optional extra is not installed;
- ``<!-- docs-test: skip REASON -->``: never run, and the test reports REASON (a real server, a key). Keep them rare.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCE = re.compile(
    r"^(?:(?P<indent_m> *)<!-- docs-test: (?P<marker>.*?) -->\n)?(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n"
    r"(?P<code>.*?)^(?P=indent)```[ \t]*$",
    re.S | re.M,
)
#: Variables that would let a block reach a paid service; the blocks run without them.
_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MEM0_API_KEY", "HONCHO_API_KEY", "SUPERMEMORY_API_KEY",
         "IRONMEM_HOME", "IRONMEM_DEBUG")
#: At most this share of the blocks may be marked ``skip``.
MAX_SKIPPED_SHARE = 0.3


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    marker: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if m["lang"] != "python":
                continue
            line = text.count("\n", 0, m.start("indent")) + 1
            found.append(Block(page, line, textwrap.dedent(m["code"]), (m["marker"] or "").strip()))
    return found


BLOCKS = _blocks()


def test_every_python_block_is_found() -> None:
    """The fence pattern misses no block (a miss would silently leave it untested)."""
    opened = sum(len(re.findall(r"^ *```python\b", p.read_text(encoding="utf-8"), re.M)) for p in PAGES)
    assert opened == len(BLOCKS) and len(BLOCKS) >= 20
    markers = [b.marker for b in BLOCKS if b.marker]
    assert all(re.fullmatch(r"requires [\w.]+(, [\w.]+)*|skip \S.{15,}", m) for m in markers), markers
    skipped = [b.id for b in BLOCKS if b.marker.startswith("skip")]
    assert len(skipped) <= MAX_SKIPPED_SHARE * len(BLOCKS), f"too many blocks that never run: {skipped}"


def _importable(module: str) -> bool:
    """True when ``module`` (dotted: ``llama_index.llms.anthropic``) can be imported here."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_runs(block: Block, tmp_path: Path) -> None:
    if block.marker.startswith("skip "):
        pytest.skip(f"{block.id} is not run: {block.marker[5:]}")
    if block.marker.startswith("requires "):
        missing = [m for m in block.marker[9:].split(", ") if not _importable(m)]
        if missing:
            pytest.skip(f"{block.id} needs {', '.join(missing)} (an optional extra; pip install -e '.[all]')")
    env = {k: v for k, v in os.environ.items() if k not in _KEYS}
    env.update({"PYTHONPATH": str(REPO), "HOME": str(tmp_path), "PYTHONIOENCODING": "utf-8",
                "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"})
    result = subprocess.run([sys.executable, "-c", block.code], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=240, check=False)
    assert result.returncode == 0, f"{block.id} failed:\n{block.code}\n{result.stderr[-3000:]}"


def _doc_figures():
    spec = importlib.util.spec_from_file_location("ironmem_doc_figures", REPO / "tools" / "doc_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_token_figures_the_docs_quote_are_current() -> None:
    """docs/cache-economics.md quotes what `ironmem tokens` prints; a changed tool schema must update it."""
    from ironmem.core.errors import EncodingUnavailableError

    figures = _doc_figures()
    assert figures.pages(), "no page has a <!-- figures: ... --> region"
    try:
        report = figures._report()
    except EncodingUnavailableError as exc:
        pytest.skip(f"the docs quote exact o200k_base figures; set TIKTOKEN_CACHE_DIR to check them: {exc}")
    missing = [m for m in ("hindsight_client", "sqlite_vec", "mem0") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the what-if figures add every registered provider; {', '.join(missing)} not installed")
    assert figures.stale(report) == [], "run: python tools/doc_figures.py"
    # and the check notices a stale figure
    page = figures.pages()[0]
    text = page.read_text(encoding="utf-8")
    body = figures.REGION.search(text)
    doctored = text.replace(body["body"], body["body"].replace("| 43 |", "| 41 |").replace("1", "2", 1))
    assert figures.render(doctored, report) == text
