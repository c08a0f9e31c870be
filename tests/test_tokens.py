"""TokenCounter and TokenReport: counts equal tiktoken's count of the same bytes, measured on a real Session."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import tiktoken

from ironmem import MemoryManager, MemoryProvider, ToolSchema
from ironmem.analysis.tokens import (
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TokenCounter,
    TokenReport,
    serialize_json,
    tiktoken_cache_filename,
)
from ironmem.core.errors import EncodingUnavailableError
from ironmem.core.fence import fence_overhead_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEXTS = [
    "hello world",
    "The user prefers metric units and answers in Portuguese.",
    "爬山 is hiking; 👩‍💻 codes; Persian: می‌خواهم",
    "literal special token text: <|endoftext|> stays plain text",
    "",
    "    indented\n\tcode = {'a': [1, 2, 3]}\n",
]


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    """The counter as users get it: exact with the encoding file, the labelled estimate without (both are tested)."""
    return TokenCounter("o200k_base")


def exact(encoding: str = "o200k_base") -> TokenCounter:
    """A counter that must be exact: tests comparing with tiktoken itself skip, saying why, without the file."""
    try:
        return TokenCounter(encoding, require_exact=True)
    except EncodingUnavailableError as exc:
        pytest.skip(f"needs tiktoken's {encoding} file (set TIKTOKEN_CACHE_DIR; ../shared/tiktoken-cache): {exc}")


@pytest.fixture()
def manager(tmp_path):
    with MemoryManager(home=tmp_path / "home") as m:
        yield m


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_counts_equal_tiktoken_on_the_same_bytes(encoding: str) -> None:
    counter = exact(encoding)
    assert counter.exact and counter.method == f"tiktoken {encoding}"
    reference = tiktoken.get_encoding(encoding)
    for text in TEXTS:
        expected = reference.encode(text, disallowed_special=())
        assert counter.encode(text) == expected
        assert counter.count(text) == len(expected)
    assert counter.decode(counter.encode(TEXTS[2])) == TEXTS[2]


def test_encodings_really_differ() -> None:
    text = "Ünïcödé and 漢字 make tokenizers disagree"
    assert exact("o200k_base").count(text) != exact("cl100k_base").count(text)


def test_for_model_picks_the_model_encoding() -> None:
    assert TokenCounter.for_model("gpt-4o").encoding_name == "o200k_base"
    assert TokenCounter.for_model("gpt-4").encoding_name == "cl100k_base"
    assert TokenCounter.for_model("claude-sonnet-4-5").encoding_name == "o200k_base"  # fallback


def test_bad_arguments_are_clear(counter: TokenCounter) -> None:
    with pytest.raises(ValueError, match="unknown tiktoken encoding 'nope'"):
        TokenCounter("nope")
    with pytest.raises(TypeError, match="takes a str"):
        counter.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'openai' or 'anthropic'"):
        counter.count_tool(ToolSchema("t", "d"), "gemini")  # type: ignore[arg-type]


def test_tool_serialization_is_what_the_sdks_send() -> None:
    """Our JSON bytes are the bytes the openai and anthropic SDKs put on the wire."""
    openai_json = pytest.importorskip("openai._utils._json")
    anthropic_json = pytest.importorskip("anthropic._utils._json")
    schema = ToolSchema("search", "Find notes — ünïcode kept", {"type": "object", "properties": {"q": {"type": "string"}}})
    assert serialize_json(schema.to_openai()).encode() == openai_json.openapi_dumps(schema.to_openai())
    assert serialize_json(schema.to_anthropic()).encode() == anthropic_json.openapi_dumps(schema.to_anthropic())


def test_tool_counts() -> None:
    counter = exact()
    enc = tiktoken.get_encoding("o200k_base")
    schema = ToolSchema("echo", "Echo text back.", {"type": "object", "properties": {"text": {"type": "string"}}})
    compact = json.dumps(schema.to_openai(), separators=(",", ":"), ensure_ascii=False)
    assert counter.count_tool(schema, "openai") == len(enc.encode(compact))
    compact = json.dumps(schema.to_anthropic(), separators=(",", ":"), ensure_ascii=False)
    assert counter.count_tool(schema, "anthropic") == len(enc.encode(compact))
    two = [schema, ToolSchema("ping", "Ping.")]
    array = json.dumps([s.to_openai() for s in two], separators=(",", ":"), ensure_ascii=False)
    assert counter.count_tools(two) == len(enc.encode(array))
    assert counter.count_tools([]) == 0


def test_count_messages_adds_the_chat_framing(counter: TokenCounter) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}], "name": "ada"},
    ]
    expected = (
        2 * TOKENS_PER_MESSAGE
        + counter.count("system") + counter.count("Be brief.")
        + counter.count("user") + counter.count("Hi there")
        + TOKENS_PER_NAME + counter.count("ada")
        + REPLY_PRIMING_TOKENS
    )
    assert counter.count_messages(messages) == expected
    assert counter.count_messages(messages, reply_priming=False) == expected - REPLY_PRIMING_TOKENS
    with pytest.raises(TypeError, match="'role' and 'content'"):
        counter.count_messages(["hi"])  # type: ignore[list-item]


def test_cache_filename_is_tiktokens_own() -> None:
    import hashlib

    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    assert tiktoken_cache_filename("cl100k_base") == hashlib.sha1(url.encode()).hexdigest()
    shared = os.environ.get("TIKTOKEN_CACHE_DIR")
    if shared and os.path.isdir(shared) and os.listdir(shared):  # the repo's offline cache uses exactly these names
        assert os.path.exists(os.path.join(shared, tiktoken_cache_filename("o200k_base")))


def _offline(tmp_path, code: str | None = None, argv: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter with an empty encoding cache and no usable network (a refusing proxy)."""
    empty = tmp_path / "no-encodings"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(empty), "HTTPS_PROXY": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "", "PYTHONPATH": str(REPO), "COLUMNS": "200",
           "IRONMEM_HOME": str(tmp_path / "home")}
    args = ["-c", code] if code is not None else ["-m", "ironmem.cli", *argv]
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=240,
                          cwd=tmp_path, check=False)


def test_missing_encoding_file_says_where_it_must_be(tmp_path) -> None:
    """Offline, ``require_exact=True`` raises with the file to add; the default counter says the same and estimates."""
    code = (
        "from ironmem.analysis.tokens import TokenCounter\n"
        "from ironmem.core.errors import EncodingUnavailableError\n"
        "try:\n    TokenCounter('cl100k_base', require_exact=True)\n"
        "except EncodingUnavailableError as exc:\n    print('ERR', exc)\n"
        "c = TokenCounter('cl100k_base')\n"
        "print('EXACT', c.exact, c.count('hello world'), repr(c))\nprint('METHOD', c.method)\n"
    )
    out = _offline(tmp_path, code)
    assert out.stdout.startswith("ERR"), out.stderr
    expected_file = os.path.join(str(tmp_path / "no-encodings"), tiktoken_cache_filename("cl100k_base"))
    err, flags, method = out.stdout.splitlines()[:3]
    assert "TIKTOKEN_CACHE_DIR" in err and expected_file in err
    assert flags == "EXACT False 2 TokenCounter('cl100k_base', estimate)"
    assert "estimate" in method and expected_file in method
    assert issubclass(EncodingUnavailableError, Exception)


def test_offline_counts_are_the_estimate_and_every_report_says_so(tmp_path) -> None:
    code = (
        "import json, tempfile\n"
        "from ironmem import MemoryManager\n"
        "from ironmem.analysis import TokenCounter, TokenReport\n"
        "from ironmem.core.token_estimate import estimate_ids, estimate_tokens\n"
        "c = TokenCounter()\n"
        f"texts = {TEXTS!r}\n"
        "assert [c.count(t) for t in texts] == [estimate_tokens(t) for t in texts]\n"
        "assert [c.decode(c.encode(t)) for t in texts] == texts and c.encode(texts[1]) == estimate_ids(texts[1])\n"
        "with MemoryManager(home=tempfile.mkdtemp()) as m:\n"
        "    s = m.start_session('s')\n"
        "    r = TokenReport.for_session(s, c)\n"
        "    s.end()\n"
        "print(json.dumps({'dict': r.to_dict(), 'table': r.to_table()}))\n"
    )
    out = _offline(tmp_path, code)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["dict"]["exact"] is False and "estimate" in report["dict"]["counting"]
    assert report["dict"]["fence_overhead_tokens"] > 0 and report["dict"]["tools_total"]["openai_tokens"] > 0
    assert "ESTIMATES" in report["table"] and "TIKTOKEN_CACHE_DIR" in report["table"]


def test_cli_tokens_and_simulate_work_offline_with_labelled_estimates(tmp_path) -> None:
    (tmp_path / "home").mkdir()
    tokens = _offline(tmp_path, argv=("tokens", "--json"))
    assert tokens.returncode == 0, tokens.stderr
    report = json.loads(tokens.stdout)
    assert report["exact"] is False and report["fence_overhead_tokens"] > 0 and "session_search" in str(report)
    table = _offline(tmp_path, argv=("tokens",))
    assert table.returncode == 0, table.stderr
    assert "ESTIMATES" in table.stdout and "fence overhead" in table.stdout
    simulate = _offline(tmp_path, argv=("simulate", "--turns", "3", "--json"))
    assert simulate.returncode == 0, simulate.stderr
    rows = json.loads(simulate.stdout)["results"]
    assert rows and all(r["exact_tokens"] is False and 0 <= r["cached_tokens"] <= r["input_tokens"] for r in rows)
    assert any(r["cached_tokens"] > 0 for r in rows)
    printed = _offline(tmp_path, argv=("simulate", "--turns", "3", "--policy", "vllm"))
    assert printed.returncode == 0, printed.stderr
    assert "ESTIMATES" in printed.stdout and "frozen_replay" in printed.stdout


# -- TokenReport on a real session ------------------------------------------------------------------
def test_report_for_a_fresh_session(manager, counter: TokenCounter) -> None:
    session = manager.start_session("s1")
    report = TokenReport.for_session(session, counter)
    assert report.fence_overhead == counter.count(fence_overhead_text())
    assert report.snapshot == counter.count(session.system_prompt_block())
    assert report.snapshot_chars == len(session.system_prompt_block())
    assert report.last_recall is None  # nothing recalled yet
    names = [t.name for t in report.tools]
    assert names == [s.name for s in session.tool_schemas()]
    for tool, schema in zip(report.tools, session.tool_schemas()):
        assert tool.openai == counter.count_json(schema.to_openai())
        assert tool.anthropic == counter.count_json(schema.to_anthropic())
        assert tool.provider == "builtin"
    assert report.tools_openai == counter.count_tools(session.tool_schemas(), "openai")
    assert report.providers["builtin"]["openai"] == sum(t.openai for t in report.tools)
    # no external provider: the what-if uses the providers registered under the ironmem.providers entry point
    if report.what_if:
        assert report.what_if_source.startswith("registered providers: ")
        assert report.what_if[0].openai == report.tools_openai  # N=0 is the session as it is
        assert [r.allowed for r in report.what_if] == [True, True] + [False] * (len(report.what_if) - 2)
        assert all(a.openai < b.openai for a, b in zip(report.what_if, report.what_if[1:]))
    else:
        assert "what_if=" in report.what_if_source
    json.dumps(report.to_dict())
    explicit_none = TokenReport.for_session(session, counter, what_if=[])
    assert explicit_none.what_if == () and explicit_none.what_if_source == "none given"


def test_report_measures_the_last_recall(manager, counter: TokenCounter) -> None:
    session = manager.start_session("s1")
    session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Prefers metric units"})
    recall = session.prefetch("which units?")
    assert recall  # the live delta
    report = TokenReport.for_session(session, counter)
    assert report.last_recall == counter.count(recall.fenced())
    assert report.last_recall > report.fence_overhead
    assert report.last_recall_items == len(recall.items)


def test_what_if_grows_with_real_schemas(manager, counter: TokenCounter) -> None:
    session = manager.start_session("s1")
    builtin = session.tool_schemas()
    vector = [ToolSchema("vector_search", "Semantic search over stored memories.",
                         {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})]
    graph = [ToolSchema("graph_query", "Query the knowledge graph of people and projects.",
                        {"type": "object", "properties": {"cypher": {"type": "string"}}}),
             ToolSchema("graph_add", "Add a fact triple.", {"type": "object", "properties": {"s": {"type": "string"}}})]
    report = TokenReport.for_session(session, counter, what_if=[vector, graph])
    assert [r.external_providers for r in report.what_if] == [0, 1, 2]
    assert [r.allowed for r in report.what_if] == [True, True, False]
    assert report.what_if[0].openai == counter.count_tools(builtin)
    assert report.what_if[2].openai == counter.count_tools([*builtin, *vector, *graph])
    assert report.what_if[2].anthropic == counter.count_tools([*builtin, *vector, *graph], "anthropic")
    assert report.what_if[2].tools == len(builtin) + 3
    table = report.to_table()
    assert f"{report.what_if[2].openai:,}" in table and "refused" in table
    with pytest.raises(TypeError, match="list of ToolSchema"):
        TokenReport.for_session(session, counter, what_if=[["not a schema"]])  # type: ignore[list-item]


class NotesProvider(MemoryProvider):
    """A small real external provider with two tools."""

    name = "notes"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx) -> None:
        pass

    def tool_schemas(self) -> list[ToolSchema]:
        return [
            ToolSchema("notes_search", "Search the user's notes app.", {"type": "object", "properties": {"q": {"type": "string"}}}),
            ToolSchema("notes_add", "Add a note.", {"type": "object", "properties": {"text": {"type": "string"}}}),
        ]


def test_report_per_provider_and_what_if_from_the_active_external(tmp_path, counter: TokenCounter) -> None:
    with MemoryManager(home=tmp_path / "h", external=NotesProvider()) as manager:
        session = manager.start_session("s1")
        report = TokenReport.for_session(session, counter, max_external=3)
        assert set(report.providers) == {"builtin", "notes"}
        assert report.providers["notes"]["tools"] == 2
        notes = [s for s in session.tool_schemas() if s.provider == "notes"]
        assert report.providers["notes"]["openai"] == sum(counter.count_tool(s) for s in notes)
        assert "notes" in report.what_if_source
        assert [r.external_providers for r in report.what_if] == [0, 1, 2, 3]
        # row 1 is exactly the session as it is
        assert report.what_if[1].openai == report.tools_openai
        assert report.what_if[3].tools == report.what_if[0].tools + 3 * 2


# -- concurrent first use ---------------------------------------------------------------------------
_FIRST_USE = """
import asyncio, json, sys, threading
from ironmem.analysis import PRICES, OpenAIPolicy, PrefixCacheSimulator, TokenCounter
from ironmem.core.budget import measure_tools
from ironmem.core.provider import ToolSchema
from ironmem.core.token_estimate import estimate_tokens

TEXT = "The user prefers metric units; 爬山 on weekends. " * 20
TOOLS = [ToolSchema("kit_search", "Search the notes for a fact."), ToolSchema("kit_add", "Add a note.")]

def work(i):
    counter = TokenCounter("o200k_base" if i % 2 else "cl100k_base")   # both encodings loaded at the same moment
    ids = counter.encode(TEXT)
    budget = measure_tools(TOOLS, 600)
    sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-4.1" if i % 2 else "gpt-4o"))
    sim.request(list(range(3000)), at=0.0)
    cached = sim.request(list(range(3000)) + [1, 2], at=1.0).cached_tokens
    price = PRICES.get("openai", "gpt-4o").input_per_mtok
    return [counter.encoding_name, counter.exact, len(ids), counter.decode(ids) == TEXT, budget.used, budget.fits,
            budget.exact_used, cached > 0, price, estimate_tokens(TEXT)]

N = 24
barrier = threading.Barrier(N + 1)
results, errors = [None] * (2 * N), []

def thread(i):
    barrier.wait()
    try:
        results[i] = work(i)
    except BaseException as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=thread, args=(i,)) for i in range(N)]
for t in threads:
    t.start()

async def tasks():
    barrier.wait()   # the threads and the tasks start together
    async def one(i):
        return await asyncio.to_thread(work, i) if i % 2 else work(i)
    out = await asyncio.gather(*(one(N + i) for i in range(N)), return_exceptions=True)
    for i, r in enumerate(out):
        if isinstance(r, BaseException):
            errors.append(repr(r))
        else:
            results[N + i] = r

asyncio.run(tasks())
for t in threads:
    t.join()
print(json.dumps({"errors": errors, "results": results}))
"""


@pytest.mark.parametrize("mode", ["offline", "with the encoding files"])
def test_concurrent_first_use_in_a_fresh_process(tmp_path, mode: str) -> None:
    """Threads and asyncio tasks that first touch the encodings, the budget and the price table at the same moment
    all get the same answers, and nothing raises (lazily built shared state is built once, under a lock)."""
    if mode == "offline":
        proc = _offline(tmp_path, _FIRST_USE)
    else:
        exact("o200k_base"), exact("cl100k_base")  # skips, saying why, without the files
        env = {**os.environ, "PYTHONPATH": REPO}
        proc = subprocess.run([sys.executable, "-c", _FIRST_USE], env=env, capture_output=True, text=True,
                              timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["errors"] == []
    results = out["results"]
    assert all(r is not None for r in results)
    for parity in (0, 1):
        same = {json.dumps(r) for i, r in enumerate(results) if i % 2 == parity}
        assert len(same) == 1, same  # one encoding per parity: every caller got identical figures
    first = results[1]
    assert first[1] is (mode != "offline") and first[3] is True and first[5] is True
    assert (first[6] is None) is (mode == "offline")  # the exact budget figure only with the file
