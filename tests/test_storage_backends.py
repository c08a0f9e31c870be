"""The storage suite: every test runs against files + SQLite AND against PostgreSQL (a throwaway cluster).

Same tool answers, same limits under the lock, same frozen snapshot and live delta, same search results.
The PostgreSQL runs are skipped (with the reason) where no server binaries exist.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.builtin import BuiltinMemoryProvider
from ironmem.core.builtin.storage import FileStorage, MemoryStorage, open_storage
from ironmem.core.builtin.tools import Operation, OperationError
from ironmem.core.errors import IronMemError, StorageError

BACKENDS = ["files", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def storage_spec(backend: str, request: pytest.FixtureRequest) -> str | None:
    """``None`` (files under the home) or a fresh PostgreSQL database URL."""
    if backend == "files":
        return None
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def make_manager(home: Path, storage_spec: str | None) -> Iterator[Callable[..., MemoryManager]]:
    made: list[MemoryManager] = []

    def make(**kwargs: object) -> MemoryManager:
        # The lexical ranking both backends share (hybrid recall, the default where the model is installed, runs
        # on files + SQLite only: test_default_recall_per_backend).
        kwargs.setdefault("embeddings", False)
        m = MemoryManager(home=home, storage=storage_spec, prefetch_timeout=2.0, **kwargs)  # type: ignore[arg-type]
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def call(session: object, name: str, **args: object) -> dict[str, object]:
    return json.loads(session.handle_tool_call(name, args))  # type: ignore[attr-defined]


# -- writes ---------------------------------------------------------------------------------------
def test_add_replace_remove_and_duplicates(make_manager: Callable[..., MemoryManager]) -> None:
    s = make_manager().start_session("s1")
    assert call(s, "memory", action="add", target="user", content="Name: Ada")["success"]
    assert call(s, "memory", action="add", target="user", content="Name: Ada")["entries"] == 1  # duplicate: no-op
    assert call(s, "memory", action="add", target="user", content="Lives in Lisbon")["entries"] == 2
    r = call(s, "memory", action="replace", target="user", old_text="Lisbon", content="Lives in Porto")
    assert r["success"] and r["usage"].endswith("/1,375 chars")
    assert call(s, "memory", action="remove", target="user", old_text="Name")["entries"] == 1
    bad = call(s, "memory", action="remove", target="user", old_text="nowhere")
    assert bad["success"] is False and "No entry matched" in bad["error"]
    assert s.manager.builtin.state("user").entries == ("Lives in Porto",)


def test_batch_is_all_or_nothing_across_targets(make_manager: Callable[..., MemoryManager]) -> None:
    s = make_manager().start_session("s1")
    call(s, "memory", action="add", target="memory", content="Deploys on Fridays")
    r = call(s, "memory", operations=[
        {"action": "add", "target": "user", "content": "Prefers tea"},
        {"action": "replace", "target": "memory", "old_text": "no such entry", "content": "x"},
    ])
    assert r["success"] is False
    b = s.manager.builtin
    assert b.state("user").entries == () and b.state("memory").entries == ("Deploys on Fridays",)
    r = call(s, "memory", operations=[
        {"action": "add", "target": "user", "content": "Prefers tea"},
        {"action": "replace", "target": "memory", "old_text": "Fridays", "content": "Deploys on Thursdays"},
    ])
    assert r["success"] and r["applied"] == 2
    assert b.state("user").entries == ("Prefers tea",) and b.state("memory").entries == ("Deploys on Thursdays",)


def test_limit_is_enforced_and_nothing_is_written(make_manager: Callable[..., MemoryManager]) -> None:
    s = make_manager(memory_char_limit=60).start_session("s1")
    assert call(s, "memory", action="add", target="memory", content="a" * 40)["success"]
    r = call(s, "memory", action="add", target="memory", content="b" * 30)
    assert r["success"] is False and "over its 60-char limit" in r["error"] and r["usage"] == "66% - 40/60 chars"
    assert s.manager.builtin.state("memory").entries == ("a" * 40,)


@pytest.mark.parametrize("overflow", ["refuse", "archive"])
def test_limit_holds_under_concurrent_writers(make_manager: Callable[..., MemoryManager], overflow: str) -> None:
    """30 threads race to add 9-char entries into a 100-char file. ``refuse``: exactly as many land as fit.
    ``archive``: every write lands, the file holds as many as fit, the rest are in the archive, none lost."""
    manager = make_manager(memory_char_limit=100, overflow=overflow)
    results: list[bool] = []
    lock = threading.Lock()

    def add(i: int) -> None:
        r = json.loads(manager.builtin.handle_tool_call("memory", {"action": "add", "target": "memory",
                                                                    "content": f"entry-{i:03d}"}))
        with lock:
            results.append(bool(r["success"]))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = manager.builtin.state("memory").entries
    # 9 entries of 9 chars + 8 separators of 3 chars = 105 > 100; 8 entries = 93.
    if overflow == "refuse":
        assert len(entries) == 8 == sum(results)
        return
    assert len(entries) == 8 and sum(results) == 30
    archived = [r.text for r in manager.builtin.archive_state("memory").archived_now(entries)]
    assert sorted(archived + list(entries)) == [f"entry-{i:03d}" for i in range(30)]


def test_frozen_snapshot_and_live_delta(make_manager: Callable[..., MemoryManager]) -> None:
    writer = make_manager()
    reader = make_manager()  # another process / machine on the same storage
    w = writer.start_session("w")
    call(w, "memory", action="add", target="user", content="Name: Ada")
    r = reader.start_session("r")
    frozen = r.system_prompt_block()
    assert "Name: Ada" in frozen
    call(w, "memory", action="add", target="memory", content="The build server is kestrel-7")
    call(w, "memory", action="remove", target="user", old_text="Ada")
    fenced = r.prefetch("which build server?").fenced()
    assert "kestrel-7" in fenced and "removed - no longer true" in fenced and "Name: Ada" in fenced
    assert r.prefetch("again").fenced() == ""  # shown once
    assert r.system_prompt_block() == frozen
    nxt = reader.start_session("r2")
    assert "kestrel-7" in nxt.system_prompt_block() and "Name: Ada" not in nxt.system_prompt_block()


def test_a_users_profile_never_reaches_another_user(make_manager: Callable[..., MemoryManager]) -> None:
    """USER.md is per user id on both backends: not in another user's snapshot, search, recall or status;
    MEMORY.md is shared when the application opts in (memory_per_user=False), and a batch over both lands
    all-or-nothing."""
    m = make_manager(memory_per_user=False)
    ada, bob, anon = m.start_session("a", user_id="ada"), m.start_session("b", user_id="bob"), m.start_session("n")
    assert call(ada, "memory", action="add", target="user", content="Ada's allergy: penicillin")["success"]
    assert call(bob, "memory", action="add", target="user", content="Bob prefers vim")["success"]
    r = call(ada, "memory", operations=[
        {"action": "add", "target": "memory", "content": "The staging host is heron-3"},
        {"action": "add", "target": "user", "content": "Ada works nights"},
    ])
    assert r["success"], r
    b = m.builtin
    assert b.state("user", "ada").entries == ("Ada's allergy: penicillin", "Ada works nights")
    assert b.state("user", "bob").entries == ("Bob prefers vim",)
    assert b.state("user").entries == ()
    assert b.state("memory").entries == ("The staging host is heron-3",)
    # a batch whose second half fails leaves both scopes as they were
    bad = call(ada, "memory", operations=[
        {"action": "add", "target": "memory", "content": "never stored"},
        {"action": "remove", "target": "user", "old_text": "no such entry"},
    ])
    assert bad["success"] is False
    assert b.state("memory").entries == ("The staging host is heron-3",)
    for other in (bob, anon):
        found = call(other, "session_search", query="penicillin")
        assert found["success"] and not any("penicillin" in h["text"] for h in found["results"])
        bad_remove = call(other, "memory", action="remove", target="user", old_text="penicillin")
        assert bad_remove["success"] is False
    assert "penicillin" in json.dumps(call(ada, "session_search", query="penicillin")["results"])
    assert "heron-3" in json.dumps(call(bob, "session_search", query="heron")["results"])
    later = make_manager(memory_per_user=False)  # another process / machine on the same storage
    block = later.start_session("b2", user_id="bob").system_prompt_block()
    assert "Bob prefers vim" in block and "heron-3" in block and "penicillin" not in block
    assert "penicillin" in later.start_session("a2", user_id="ada").system_prompt_block()
    assert "penicillin" not in later.start_session("n2").system_prompt_block()
    assert later.status(user_id="bob")["files"]["user"]["entries"] == 1
    assert set(later.status()["users"]) >= {"ada", "bob"}


def test_snapshot_is_identical_across_backends(home: Path, tmp_path: Path, pg_url: str) -> None:
    """The same writes give byte-identical snapshots on files and on PostgreSQL."""
    snaps = []
    for spec, folder in ((None, home), (pg_url, tmp_path / "pg-home")):
        with MemoryManager(home=folder, storage=spec, embeddings=False) as m:
            s = m.start_session("x")
            call(s, "memory", action="add", target="user", content="Name: Ada; 喜欢爬山")
            call(s, "memory", operations=[{"action": "add", "target": "memory", "content": "Deploys: Fridays"},
                                          {"action": "add", "target": "memory", "content": "Uses uv"}])
            snaps.append(m.start_session("y").system_prompt_block())
    assert snaps[0] == snaps[1]


def test_scopes_are_separate(storage_spec: str | None, home: Path) -> None:
    storage = open_storage(storage_spec, home=home)
    limits = {"memory": 2200, "user": 1375}
    try:
        storage.apply("", [Operation("add", "user", "shared fact")], limits)
        storage.apply("ada", [Operation("add", "user", "Ada's fact")], limits)
        storage.apply("bob@example.com", [Operation("add", "user", "Bob's fact")], limits)
        assert storage.read("", "user").entries == ("shared fact",)
        assert storage.read("ada", "user").entries == ("Ada's fact",)
        assert storage.read("bob@example.com", "user").entries == ("Bob's fact",)
        assert storage.read("carol", "memory").entries == ()
        with pytest.raises(OperationError):
            storage.apply("ada", [Operation("remove", "user", old_text="shared")], limits)
    finally:
        storage.close()


def test_transact_aborts_cleanly_when_change_raises(storage_spec: str | None, home: Path) -> None:
    storage = open_storage(storage_spec, home=home)
    try:
        storage.transact("", ["memory"], lambda cur: {"memory": ["one"]})

        def boom(cur: dict[str, object]) -> dict[str, list[str]]:
            raise OperationError("refused")

        with pytest.raises(OperationError):
            storage.transact("", ["memory", "user"], boom)
        assert storage.read("", "memory").entries == ("one",)
    finally:
        storage.close()


def test_status_reports_the_storage(make_manager: Callable[..., MemoryManager], backend: str) -> None:
    status = make_manager().status()
    assert status["storage"].startswith("files in " if backend == "files" else "postgresql://")
    assert "password" not in status["storage"]


def test_unknown_storage_is_a_clear_error(home: Path) -> None:
    with pytest.raises(StorageError, match="postgresql://"):
        MemoryManager(home=home, storage="mysql://x")
    with pytest.raises(IronMemError, match="cannot connect to PostgreSQL"):
        MemoryManager(home=home, storage="postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=1")


def test_storage_object_and_config(home: Path, tmp_path: Path, pg_url: str) -> None:
    from ironmem.core.builtin.postgres import PostgresStorage

    storage = PostgresStorage(pg_url)
    with MemoryManager(home=home, storage=storage) as m:
        assert m.builtin.storage is storage and isinstance(m.builtin.storage, MemoryStorage)
        call(m.start_session("a"), "memory", action="add", target="user", content="via object")
    config = tmp_path / "config.yaml"
    config.write_text(f"memory:\n  home: h\n  storage: {pg_url}\n", encoding="utf-8")
    with MemoryManager.from_config(config) as m:
        assert m.builtin.storage.kind == "postgresql"
        assert m.builtin.state("user").entries == ("via object",)
    assert isinstance(BuiltinMemoryProvider(home).storage, FileStorage)


# -- search ---------------------------------------------------------------------------------------
SEED_TURNS = [
    ("s1", "ada", "用户喜欢户外运动，昨天计划去爬山", "好的，注意安全"),
    ("s1", "ada", "I went hiking in the Alps last summer", "Sounds lovely"),
    ("s2", "ada", "東京の天気はどうですか", "晴れです"),
    ("s2", "bob", "The deploy of kestrel failed with error E4312", "Roll back to v2.3"),
    ("s3", "ada", "Meetings are running late again", "Let's move them to mornings"),
    ("s3", "bob", "Café crème at the office?", "Sure"),
]


@pytest.fixture
def seeded(make_manager: Callable[..., MemoryManager]) -> MemoryManager:
    m = make_manager()
    for sid, uid, user, assistant in SEED_TURNS:
        m.builtin.index.add_turn(sid, user, assistant, user_id=uid)
    m.builtin.apply([Operation("add", "user", "Prefers 乌龙茶 in the morning")])
    return m


def texts(hits: list[object]) -> list[str]:
    return [h.text for h in hits]  # type: ignore[attr-defined]


@pytest.mark.parametrize("query", ["爬山", "户外运动", "计划", "山", "爬"])
def test_chinese_words_inside_longer_runs(seeded: MemoryManager, query: str) -> None:
    assert any("爬山" in t for t in texts(seeded.builtin.index.search(query)))


def test_search_languages_stemming_and_filters(seeded: MemoryManager) -> None:
    idx = seeded.builtin.index
    assert idx.search("游泳") == []
    assert any("東京" in t for t in texts(idx.search("東京")))
    hits = idx.search("乌龙茶")
    assert hits and hits[0].kind == "user"
    assert any("hiking" in t for t in texts(idx.search("hike")))
    assert any("Meetings" in t for t in texts(idx.search("meeting run")))
    assert any("Café" in t for t in texts(idx.search("cafe")))  # diacritics folded
    assert idx.search("the and of") == []
    assert texts(idx.search("E4312"))[0].startswith("User: The deploy of kestrel")
    assert [h.user_id for h in idx.search("deploy", kinds=("turn",), user_id="ada")] == []
    assert [h.session_id for h in idx.search("hiking Alps", kinds=("turn",), exclude_session="s1")] == []
    for query in ['Alps"', "NEAR(hiking", "hiking OR", "*", "-Alps", "col:Alps", "a AND", "'", "\\", "it's:*"]:
        idx.search(query)  # never a syntax error
    assert idx.turn_count() == len(SEED_TURNS) and idx.turn_count("s1") == 2


def test_session_search_tool_and_recall(seeded: MemoryManager) -> None:
    s = seeded.start_session("new", user_id="bob")
    r = call(s, "session_search", query="kestrel deploy")
    assert r["success"] and r["results"][0]["text"].startswith("User: The deploy of kestrel")
    s = seeded.start_session("new2", user_id="ada")
    assert call(s, "session_search", query="kestrel deploy")["results"] == []  # bob's turn, not ada's
    assert "hiking in the Alps" in s.prefetch("Remember the Alps trip?").fenced()
    assert "kestrel" not in s.prefetch("how did the kestrel deploy go?").fenced()  # bob's turn: not ada's recall


def test_rare_words_rank_first(make_manager: Callable[..., MemoryManager]) -> None:
    """A word in one turn of 1,200 outranks a word in every other turn, whatever the order."""
    m = make_manager()
    rows = [("bulk", None, float(i), f"weekly status report number {i:04d}", "noted") for i in range(1200)]
    rows.insert(300, ("rare", None, 300.5, "the zanzibar status", "noted"))
    m.builtin.index.add_turns(rows)
    hits = m.builtin.index.search("status zanzibar", kinds=("turn",), limit=3)
    assert hits[0].session_id == "rare"
    assert [h.session_id for h in hits[1:]] == ["bulk", "bulk"]
    assert hits[1].ts == 1199.0  # ties (same words, same length): newest first


def _corpus(seed: int = 7, n: int = 1500) -> list[tuple[str, str | None, float, str, str]]:
    rng = random.Random(seed)
    words = ("deploy server kestrel budget meeting report hiking Alps tea coffee invoice error timeout retry "
             "database index cache latency python rust golang release rollback staging production migrate "
             "schema backup restore weekend mountain river running runs ran walked walking").split()
    zh = ["爬山", "周末", "数据库", "部署", "会议", "预算", "咖啡", "东京", "天气", "晴天"]
    rows = []
    for i in range(n):
        k = rng.randint(3, 12)
        text = " ".join(rng.choice(words) for _ in range(k))
        if rng.random() < 0.3:
            text += " " + "".join(rng.choice(zh) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.02:
            text += f" ticket T{rng.randint(1000, 1020)}"
        rows.append((f"s{i % 37}", f"u{i % 3}", float(i), text, rng.choice(words)))
    return rows


PARITY_QUERIES = [
    "kestrel deploy", "running", "walk", "爬山", "数据库 部署", "周末去爬山吧", "ticket T1005", "T1010",
    "budget meeting report", "the production rollback after the migrate of the schema went wrong again today",
    "coffee", "cache latency python", "咖啡", "天", "zzz-nothing", "deploy OR staging", "Alps hiking weekend",
    "when did we deploy the kestrel server after the budget meeting, the report, the invoice, tea and coffee on the weekend?",
]


def test_same_answers_on_both_backends(home: Path, tmp_path: Path, pg_url: str) -> None:
    """The same corpus and queries give the same turns, in the same order, with the same scores."""
    rows = _corpus()
    answers = []
    for spec, folder in ((None, home), (pg_url, tmp_path / "pg-home")):
        with MemoryManager(home=folder, storage=spec, embeddings=False) as m:
            m.builtin.index.add_turns(rows)
            got = {}
            for q in PARITY_QUERIES:
                for kwargs in ({}, {"user_id": "u1"}, {"exclude_session": "s3", "drop_stopwords": True}):
                    hits = m.builtin.index.search(q, kinds=("turn",), limit=8, **kwargs)
                    got[(q, tuple(kwargs.items()))] = [(h.text, h.session_id, h.score) for h in hits]
            answers.append(got)
    files, pg = answers
    assert sum(1 for v in files.values() if v) > 30  # the queries do find things
    for key in files:
        assert pg[key] == files[key], key


def test_storage_from_the_environment(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  home: h\n", encoding="utf-8")
    monkeypatch.setenv("IRONMEM_MEMORY_STORAGE", pg_url)
    with MemoryManager.from_config(config) as m:
        assert m.builtin.storage.kind == "postgresql"
    monkeypatch.setenv("IRONMEM_MEMORY_STORAGE", "files")
    with MemoryManager.from_config(config) as m:
        assert m.builtin.storage.kind == "files"


def test_cluster_helper_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ironmem.testing import postgres as helper

    monkeypatch.setenv("IRONMEM_PG_BIN", str(tmp_path))  # no binaries there
    monkeypatch.setattr(helper.glob, "glob", lambda pattern: [])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert helper.find_pg_bin() is None
    assert "no PostgreSQL server binaries" in (helper.unavailable_reason() or "")


ENTRIES = {
    "user": ["Name: Ada", "Prefers oolong tea in the morning", "Lives in Porto; 喜欢爬山", "Allergic to peanuts"],
    "memory": ["Deploys happen on Fridays after the review", "The staging server is kestrel-7",
               "Weekly report goes to the team on Monday", "数据库用 PostgreSQL 15"],
}
TOOL_QUERIES = ["tea", "morning tea", "爬山", "kestrel staging server", "deploy review", "Monday report team",
                "数据库", "PostgreSQL", "peanuts OR tea", "nothing-matches-this"]


def test_session_search_tool_gives_the_same_json_on_both_backends(home: Path, tmp_path: Path, pg_url: str) -> None:
    """Entries and turns together, through the tool the model calls: same results, same order."""
    answers = []
    for spec, folder in ((None, home), (pg_url, tmp_path / "pg-home")):
        with MemoryManager(home=folder, storage=spec, embeddings=False) as m:
            s = m.start_session("seed")
            for target, entries in ENTRIES.items():
                for entry in entries:
                    assert call(s, "memory", action="add", target=target, content=entry)["success"]
            for sid, uid, user, assistant in SEED_TURNS:
                m.builtin.index.add_turn(sid, user, assistant, user_id=None)
            s2 = m.start_session("ask")
            got = []
            for q in TOOL_QUERIES:
                results = call(s2, "session_search", query=q, limit=6)["results"]
                got.append([(r["kind"], r["text"], round(r["score"], 6)) for r in results])
            answers.append(got)
    assert sum(1 for a in answers[0] if a) >= 8
    assert answers[1] == answers[0]


def test_file_storage_uses_the_providers_scope_layout_and_keeps_hand_edits(home: Path) -> None:
    """FileStorage and the built-in provider agree on where a user's files live, and a direct transact keeps
    text added by hand (as its own entry, with a .bak copy) like the provider does."""
    provider = BuiltinMemoryProvider(home)
    storage = FileStorage(home)
    try:
        storage.transact("ada", ["user"], lambda cur: {"user": ["Name: Ada"]})
        assert (provider.scope_dir("ada") / "USER.md").read_text(encoding="utf-8") == "Name: Ada"
        assert provider.state("user", "ada").entries == ("Name: Ada",)
        path = home / "MEMORY.md"
        storage.transact("", ["memory"], lambda cur: {"memory": ["one"]})
        path.write_text("one\ntyped by hand", encoding="utf-8")
        out = storage.transact("", ["memory"], lambda cur: {"memory": [*cur["memory"].entries, "two"]})
        assert "two" in out["memory"].entries and any("typed by hand" in e for e in out["memory"].entries)
        assert list(home.glob("MEMORY.md.bak*"))
    finally:
        storage.close()
        provider.shutdown()


# -- privacy between users (issue 35 item 1) ---------------------------------------------------------
def _texts(session: object, query: str) -> list[str]:
    found = call(session, "session_search", query=query)
    assert found["success"], found
    return [str(hit["text"]) for hit in found["results"]]  # type: ignore[union-attr, index]


def test_session_search_never_returns_another_users_turns_or_entries(
    make_manager: Callable[..., MemoryManager],
) -> None:
    manager = make_manager()
    ada = manager.start_session("ada-1", user_id="ada", memory_per_user=True)
    assert call(ada, "memory", action="add", target="memory", content="zanzibar rollout is blocked on QA")["success"]
    assert call(ada, "memory", action="add", target="user", content="Ada's zanzibar badge number is 4471")["success"]
    ada.sync_turn("what is the zanzibar status?", "zanzibar waits for QA sign-off")
    bob = manager.start_session("bob-1", user_id="bob", memory_per_user=True)
    assert _texts(bob, "zanzibar") == []
    assert "zanzibar" not in bob.system_prompt_block()
    later = manager.start_session("ada-2", user_id="ada", memory_per_user=True)
    assert len(_texts(later, "zanzibar")) == 3  # the owner finds all three
    # With notes shared on purpose, the shared note reaches Bob, Ada's profile and turns still do not.
    shared = manager.start_session("ada-3", user_id="ada", memory_per_user=False)
    assert call(shared, "memory", action="add", target="memory", content="zanzibar ships from the eu region")["success"]
    bob_shared = manager.start_session("bob-2", user_id="bob", memory_per_user=False)
    assert _texts(bob_shared, "zanzibar") == ["zanzibar ships from the eu region"]


def test_the_memory_tool_says_whether_agent_notes_are_shared(make_manager: Callable[..., MemoryManager]) -> None:
    manager = make_manager()

    def description(**kwargs: object) -> str:
        session = manager.start_session(**kwargs)  # type: ignore[arg-type]
        (tool,) = [t for t in session.tool_schemas() if t.name == "memory"]
        return tool.description

    shared = description(user_id="ada", memory_per_user=False)
    private = description(user_id="ada", memory_per_user=True)
    single = description()
    assert "SHARED" in shared and "every user" in shared
    assert "private to the current user" in private and "SHARED" not in private
    assert "SHARED" not in single and "private to the current user" not in single


def test_session_search_echoes_a_huge_query_only_in_part(make_manager: Callable[..., MemoryManager]) -> None:
    session = make_manager().start_session("s1")
    query = "deploy " * 700_000  # ~5 MB
    answer = session.handle_tool_call("session_search", {"query": query})
    assert len(answer) < 2_000
    assert json.loads(answer)["success"] is True


# -- capacity and time (issue 37): archive, merge first, supersession -------------------------------------------
def _add(session: object, content: str, target: str = "memory") -> dict[str, object]:
    return call(session, "memory", action="add", target=target, content=content)


def test_a_full_file_moves_its_least_recalled_oldest_entry_to_the_archive(
    make_manager: Callable[..., MemoryManager],
) -> None:
    manager = make_manager(memory_char_limit=120)
    first = manager.start_session("s1")
    for fact in ("The deploy target is Ubuntu 22.04 on Hetzner", "The staging database is Postgres 15"):
        assert _add(first, fact)["success"]
    first.end()
    second = manager.start_session("s2")
    # recalled once: it stays, the other (never recalled) moves although it is not older
    assert [h["text"] for h in call(second, "session_search", query="Hetzner deploy")["results"]][0].startswith("The deploy")  # type: ignore[index]
    result = _add(second, "CI runs on GitHub Actions with two workers")
    assert result["success"] is True
    assert result["archived"] == [{"target": "memory", "entry": "The staging database is Postgres 15"}]
    assert "archive" in str(result["archive_note"])
    assert manager.builtin.state("memory").entries == (
        "The deploy target is Ubuntu 22.04 on Hetzner", "CI runs on GitHub Actions with two workers")
    (record,) = manager.builtin.archive_state("memory").archived_now()
    assert record.text == "The staging database is Postgres 15" and record.recalls == 0
    assert record.since is not None and record.at >= record.since and "full" in str(record.reason)
    # still found, marked archived, dated; and recalled by prefetch
    found = call(second, "session_search", query="staging database")["results"]
    assert found[0]["status"] == "archived" and found[0]["text"] == record.text  # type: ignore[index]
    assert "date" in found[0] and "archived_on" in found[0]  # type: ignore[operator]
    third = manager.start_session("s3")
    assert "Postgres 15" in third.prefetch("which staging database do we use?").fenced()
    # restored: back in the file, and the file's least recalled entry moves out to make room
    state = manager.builtin.restore("memory", record.id, session_id="s3")
    assert record.text in state.entries and len(state.entries) == 2
    assert record.text not in [r.text for r in manager.builtin.archive_state("memory").archived_now(state.entries)]


def test_entries_written_in_this_session_never_move(make_manager: Callable[..., MemoryManager]) -> None:
    manager = make_manager(memory_char_limit=100)
    session = manager.start_session("s1")
    assert _add(session, "a" * 45)["success"] and _add(session, "b" * 45)["success"]
    refused = _add(session, "c" * 45)
    assert refused["success"] is False and "written in this session" in str(refused["error"])
    assert "current_entries" in refused
    later = manager.start_session("s2")
    moved = _add(later, "c" * 45)
    assert moved["success"] is True and moved["archived"] == [{"target": "memory", "entry": "a" * 45}]


def test_overflow_refuse_keeps_hermes_behaviour(make_manager: Callable[..., MemoryManager]) -> None:
    manager = make_manager(memory_char_limit=100, overflow="refuse")
    manager.start_session("s1").handle_tool_call("memory", {"action": "add", "target": "memory", "content": "a" * 60})
    result = _add(manager.start_session("s2"), "b" * 60)
    assert result["success"] is False and "current_entries" in result and "retry" in str(result["error"])
    assert manager.builtin.archive_state("memory").archived_now() == []
    with pytest.raises(ValueError, match="overflow must be"):
        make_manager(overflow="drop")


def test_a_near_duplicate_add_updates_the_entry_it_duplicates(make_manager: Callable[..., MemoryManager]) -> None:
    manager = make_manager()
    session = manager.start_session("s1")
    assert _add(session, "User prefers dark mode", "user")["success"]
    merged = _add(session, "User prefers dark mode in every editor", "user")
    assert merged["merged"] == [{"target": "user", "entry": "User prefers dark mode",
                                 "now": "User prefers dark mode in every editor"}]
    assert manager.builtin.state("user", session.scopes["user"]).entries == ("User prefers dark mode in every editor",)
    covered = _add(session, "user prefers DARK mode!", "user")  # says less than the entry: nothing changes
    assert covered["merged"][0]["now"].startswith("unchanged")  # type: ignore[index]
    # different facts that share most words are not merged
    assert _add(session, "server A runs nginx")["success"] and _add(session, "server B runs nginx")["success"]
    assert len(manager.builtin.state("memory").entries) == 2
    (version,) = manager.builtin.archive_state("user", session.scopes["user"]).superseded_now()
    assert version.how == "merge" and version.by == "User prefers dark mode in every editor"


def test_a_replace_keeps_the_old_fact_as_a_dated_superseded_version(
    make_manager: Callable[..., MemoryManager],
) -> None:
    manager = make_manager()
    session = manager.start_session("s1")
    assert _add(session, "Ada lives in Lisbon", "user")["success"]
    replaced = call(session, "memory", action="replace", target="user", old_text="Lisbon", content="Ada lives in Porto")
    assert replaced["replaced_entry"] == "Ada lives in Lisbon" and replaced["kept_as_superseded"] is True
    now = call(session, "session_search", query="where does Ada live now")["results"]
    assert [h["text"] for h in now if h["kind"] == "user"] == ["Ada lives in Porto"]  # type: ignore[index, union-attr]
    before = call(session, "session_search", query="where did Ada live before")["results"]
    old = [h for h in before if h.get("status") == "superseded"]  # type: ignore[union-attr]
    assert [h["text"] for h in old] == ["Ada lives in Lisbon"]
    assert {"valid_from", "valid_until", "replaced_by"} <= set(old[0])
    assert "superseded" in manager.start_session("s2").prefetch("where did Ada live before Porto?").fenced()


def test_a_soft_warning_comes_before_the_file_is_full(make_manager: Callable[..., MemoryManager]) -> None:
    manager = make_manager(memory_char_limit=100)
    session = manager.start_session("s1")
    assert "warning" not in _add(session, "x" * 50)
    warned = _add(session, "y" * 35)
    assert "88% full" in str(warned["warning"]) and "archive" in str(warned["warning"])


def test_provenance_rides_along_through_the_archive(make_manager: Callable[..., MemoryManager]) -> None:
    """The custody layer may attach a provenance dict to a record; it survives every move (both backends)."""
    from ironmem.core.builtin.archive import Record

    manager = make_manager(memory_char_limit=60)
    storage = manager.builtin.storage
    origin = {"origin": "user", "session": "s0"}
    storage.transact_scoped({"memory": ""}, lambda cur: {"memory": ["x" * 50]},
                            archive=lambda: {"memory": [Record("written", "x" * 50, 1.0, provenance=origin)]})
    assert _add(manager.start_session("s1"), "y" * 50)["success"]
    (moved,) = manager.builtin.archive_state("memory").archived_now()
    assert moved.text == "x" * 50 and moved.provenance == origin


def test_default_recall_per_backend(home: Path, storage_spec: str | None, backend: str) -> None:
    """The default (``embeddings="auto"``): hybrid on files + SQLite where the model is installed; PostgreSQL has no
    vectors yet and recalls lexically, saying so (docs/recall.md). The lexical ranking is the backends' shared one."""
    from ironmem.core.builtin.vectors import embeddings_missing

    with MemoryManager(home=home, storage=storage_spec) as manager:
        recall = manager.status()["recall"]
    if backend == "files" and not embeddings_missing():
        assert recall["mode"] == "hybrid"
    elif backend == "files":
        assert recall["mode"] == "lexical" and "not installed" in recall["reason"]
    else:
        assert recall["mode"] == "lexical" and "no dense vectors" in recall["reason"]
