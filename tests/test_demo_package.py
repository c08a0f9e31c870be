"""``ironmem.demo`` as a package: the script, one runner per framework (LangChain, LlamaIndex, plain core API),
the cache figures and the rendering, each in its own module (issue 15)."""

from __future__ import annotations

import json
import subprocess
import sys

from test_cli import REPO, _check_demo

BLOCK_FRAMEWORKS = "import sys\nfor name in ('langchain', 'langchain_core', 'langgraph', 'llama_index'):\n    sys.modules[name] = None\n"


def test_the_demo_is_split_by_concern_and_imports_no_framework_until_it_runs() -> None:
    code = (
        BLOCK_FRAMEWORKS
        + "import ironmem.demo as demo, ironmem.demo.script, ironmem.demo.langchain, ironmem.demo.llama_index, "
        "ironmem.demo.plain, ironmem.demo.render, ironmem.demo.cache, ironmem.demo.run\n"
        "print(sorted(demo.__all__))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "run_demo" in proc.stdout and "print_token_report" in proc.stdout and "SCRIPT" in proc.stdout


def test_plain_demo_needs_no_framework_and_sends_what_the_langchain_loop_sends() -> None:
    """The plain runner builds requests as the adapters do: the same system prompt bytes, fences and messages."""
    from ironmem.demo import run_demo

    code = BLOCK_FRAMEWORKS + "from ironmem.cli import main\nmain(['demo', '--framework', 'plain', '--json'])\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    plain = json.loads(proc.stdout)
    assert plain["framework"] == "plain"
    _check_demo(plain)

    langchain = run_demo(framework="langchain", console=None).to_dict()
    def shape(record: dict) -> list[tuple]:
        return [(r["session"], r["turn"], r["system_sha256"], r["messages"], r["tools"], r["recall_fenced"])
                for r in record["requests"]]

    assert shape(plain) == shape(langchain)
    assert plain["snapshots"] == langchain["snapshots"]
    assert [t["answer"] for t in plain["turns"]] == [t["answer"] for t in langchain["turns"]]


def test_demo_options_are_checked_the_same_way_for_every_runner() -> None:
    import pytest

    from ironmem.demo import DemoError, run_demo

    with pytest.raises(DemoError, match="langchain, llama-index or plain"):
        run_demo(framework="autogen", console=None)
    with pytest.raises(DemoError, match="drop --framework plain"):
        run_demo(framework="plain", model="openai:gpt-4.1-mini", console=None)
