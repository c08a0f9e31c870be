"""SupermemoryProvider on the real supermemory SDK (5.x) against a loopback stub of Supermemory's API v5.

Every request the SDK sends is validated against the vendored ``fern/openapi.json`` (tests/data/openapi), and
every answer of the stub against the same file; each test ends by asserting the stub saw no violation.

Live check against Supermemory's service (skipped without a key), one command:

    SUPERMEMORY_API_KEY=... python -m pytest tests/test_provider_supermemory.py -k live -v
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("supermemory")

from servers import HostedScenarios, checked_stub, cli_status, hosted_manager, provider_status, vendored_spec

from ironmem.core.config import load_config, manager_from_config, provider_class
from ironmem.core.errors import ConfigError
from ironmem.providers.supermemory import (
    DEFAULT_SUPERMEMORY_TOOLS,
    SUPERMEMORY_TOOLS,
    SupermemoryProvider,
)
from ironmem.testing.hosted_fakes import SupermemoryFake, supermemory_stub
from ironmem.testing.openapi_stub import Fault, StubResponse, StubServer

SPEC = vendored_spec("supermemory-v5.openapi.json", "Supermemory")
KEY = "sm-test-0123456789abcdef"
ADD = "postNsByNamespaceDocument"
SEARCH = "postNsByNamespaceSearch"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    yield from checked_stub(supermemory_stub(SPEC, api_key=KEY), "Supermemory")


def make(stub: StubServer, **options: object) -> SupermemoryProvider:
    options.setdefault("api_key", KEY)
    options.setdefault("api_timeout", 3.0)
    return SupermemoryProvider(base_url=stub.url, **options)


def fake(stub: StubServer) -> SupermemoryFake:
    assert isinstance(stub.handler, SupermemoryFake)
    return stub.handler


class TestSupermemory(HostedScenarios):
    key_env = "SUPERMEMORY_API_KEY"
    wrong_key = "sm-wrong-key-0000000000"
    search_tool = "supermemory_search"
    add_operation = ADD
    rate_limit_body = {"error": "Too many requests"}

    def make(self, stub: StubServer, **options: object) -> SupermemoryProvider:
        return make(stub, **options)

    def user_turns(self, stub: StubServer, user: str) -> list[str]:
        docs = [d["content"] for (ns, _doc), d in fake(stub).documents.items() if ns == f"ironmem_{user}"]
        return [line.removeprefix("user: ") for doc in docs for line in doc.splitlines() if line.startswith("user: ")]


def test_every_hook_and_tool_sends_requests_that_validate(stub: StubServer) -> None:
    provider = make(stub, tools=list(SUPERMEMORY_TOOLS), entity_context="Remember lasting facts only.")
    provider.initialize("s-1", user_id="alice")
    provider.sync_turn("I moved to Lyon last spring", "Lyon is lovely.", session_id="s-1")
    provider.sync_turn("I also play the cello", "Great.", session_id="s-1")
    provider.on_memory_write("add", "user", "Alice lives in Lyon")
    recalled = provider.prefetch("Where do I live, Lyon?", session_id="s-1")
    assert any(item.startswith("[Supermemory profile]") and "Alice lives in Lyon" in item for item in recalled)
    results = {name: json.loads(provider.handle_tool_call(name, args)) for name, args in (
        ("supermemory_search", {"query": "cello", "limit": 3}),
        ("supermemory_store", {"content": "Alice prefers trains"}),
        ("supermemory_profile", {}),
    )}
    assert all(r["success"] for r in results.values()), results
    hit = results["supermemory_search"]["results"][0]
    assert "cello" in hit["memory"]
    forgot = json.loads(provider.handle_tool_call("supermemory_forget", {"id": hit["id"]}))
    assert forgot == {"success": True, "forgotten": hit["id"]}
    assert json.loads(provider.handle_tool_call("supermemory_search", {"query": "cello"}))["count"] == 0
    by_query = json.loads(provider.handle_tool_call("supermemory_forget", {"query": "prefers trains"}))
    assert by_query["success"] and by_query["memory"] == "Alice prefers trains"
    provider.on_session_end("s-1")
    provider.shutdown()
    # one document per session, appended turn by turn, with the extraction guidance attached
    session_doc = fake(stub).documents[("ironmem_alice", "ironmem-session-s-1")]
    assert session_doc["content"].splitlines() == ["user: I moved to Lyon last spring", "assistant: Lyon is lovely.",
                                                   "user: I also play the cello", "assistant: Great."]
    adds = [e.body for e in stub.calls(ADD)]
    assert all(b["supportingContext"] == "Remember lasting facts only." for b in adds)
    used = {e.operation_id for e in stub.calls()}
    assert {ADD, SEARCH, "postNsByNamespaceProfile", "deleteNsByNamespaceMemories"} <= used
    assert all(e.problems == [] for e in stub.calls())


def test_the_stub_rejects_requests_and_answers_that_break_the_description(stub: StubServer) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    extra = httpx.post(f"{stub.url}/ns/alice/document", json={"content": "x", "containerTags": ["a"]}, headers=headers)
    assert extra.status_code == 400 and "Additional properties" in json.dumps(extra.json())  # the v3 field
    bad_ns = httpx.post(f"{stub.url}/ns/not%20valid/search", json={"query": "x"}, headers=headers)
    assert bad_ns.status_code == 400 and "path parameter namespace" in json.dumps(bad_ns.json())
    v3 = httpx.post(f"{stub.url}/v3/documents", json={"content": "x"}, headers=headers)
    assert v3.status_code == 404  # Hermes's 3.x endpoint is not in the v5 description
    no_auth = httpx.post(f"{stub.url}/ns/alice/search", json={"query": "x"})
    assert no_auth.status_code == 400 and "Authorization" in json.dumps(no_auth.json())
    assert len(stub.violations) == 4
    stub.reset_records()
    original = stub.handler
    stub.handler = lambda req: StubResponse(200, {"results": [{"id": "m"}]}) if req.operation_id == SEARCH else original(req)
    httpx.post(f"{stub.url}/ns/alice/search", json={"query": "x"}, headers=headers)
    assert any("response 200 body" in v for v in stub.violations)
    stub.reset_records()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(500, {"error": "boom"}), "HTTP 500"),
        (Fault(503, {"error": "maintenance"}, {"Retry-After": "1"}), "HTTP 503"),
        (Fault(200, raw=b"<html>gateway</html>"), "does not parse"),
        (Fault(200, body={"unexpected": True}, conform=False), "does not parse"),
        (Fault(drop=True), "could not connect"),
        (Fault(None, delay=3.0), "no answer within 0.5s"),
    ],
    ids=["server-error", "unavailable", "malformed-body", "wrong-shape", "dropped-connection", "timeout"],
)
def test_failures_degrade_then_recover(stub: StubServer, tmp_path: Path, fault: Fault, expected: str) -> None:
    # the short timeout only where the fault is a delay (see the Honcho test of the same name)
    provider = make(stub, api_timeout=0.5) if fault.delay else make(stub)
    with hosted_manager(tmp_path, provider) as manager:
        session = manager.start_session("s-f", user_id="dave")
        session.sync_turn("My dog is called Rex", "Nice name.")
        assert manager.drain(10)
        session.prefetch("warm up")  # turn 1 also fetches the profile; later turns only search
        stub.inject(Fault(**{**fault.__dict__, "operation": SEARCH}))
        started = time.perf_counter()
        session.prefetch("What is my dog called?")
        assert time.perf_counter() - started < 4.0
        entry = provider_status(manager, "supermemory")
        assert entry["state"] == "degraded" and expected in entry["reason"], entry
        recall = session.prefetch("What is my dog called?")
        assert any("Rex" in item.text for item in recall.items if item.source == "supermemory")
        assert provider_status(manager, "supermemory")["state"] == "active"
        session.end()


def test_secrets_are_masked_before_they_reach_supermemory(stub: StubServer, tmp_path: Path) -> None:
    secret = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("s-sec", user_id="erin")
        session.sync_turn(f"my GitHub token is {secret}", "I will not repeat it.")
        session.handle_tool_call("supermemory_store", {"content": f"token {secret}"})
        session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Erin uses GitHub daily"})
        session.prefetch(f"what is {secret}?")
        session.end()
    sent = json.dumps([e.body for e in stub.calls()])
    assert secret not in sent and "my GitHub token is" in sent
    assert "Erin uses GitHub daily" in sent  # the built-in write was mirrored


def test_users_get_separate_namespaces_and_shared_tags_are_explicit(stub: StubServer) -> None:
    provider = make(stub)
    assert provider.namespace_for("alice") == "ironmem_alice"
    assert provider.namespace_for("bob@example.com") != provider.namespace_for("bob_example.com")
    long = provider.namespace_for("x" * 500)
    assert len(long) <= 100
    shared = make(stub, container_tag="hermes")
    assert shared.namespace_for("alice") == shared.namespace_for("bob") == "hermes"
    assert make(stub, container_tag="team_{identity}", identity="coder").namespace_for("a") == "team_coder"


def test_missing_key_is_a_clear_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SUPERMEMORY_API_KEY", raising=False)
    monkeypatch.delenv("IRONMEM_SUPERMEMORY_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="SUPERMEMORY_API_KEY"):
        SupermemoryProvider()
    cfg = tmp_path / "config.yaml"
    cfg.write_text("memory:\n  provider: supermemory\nsupermemory:\n  container_tag: t\n")
    with pytest.raises(ConfigError, match="SUPERMEMORY_API_KEY"):
        load_config(cfg)


def test_hermes_supermemory_json_and_environment(monkeypatch: pytest.MonkeyPatch, stub: StubServer,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("SUPERMEMORY_API_KEY", KEY)
    monkeypatch.setenv("SUPERMEMORY_BASE_URL", stub.url)
    hermes = tmp_path / "supermemory.json"
    hermes.write_text(json.dumps({
        "container_tag": "hermes_{identity}", "auto_recall": True, "auto_capture": True, "max_recall_results": 7,
        "profile_frequency": 3, "capture_mode": "all", "search_mode": "documents", "api_timeout": 4.0,
        "entity_context": "Only lasting facts.", "enable_custom_container_tags": False, "custom_containers": [],
    }), encoding="utf-8-sig")  # Hermes reads utf-8-sig: a BOM is fine
    provider = SupermemoryProvider.from_hermes_config(hermes)
    s = provider.settings
    assert (s.container_tag, s.max_recall_results, s.search_mode, s.api_timeout) == ("hermes_{identity}", 7, "chunks", 4.0)
    assert s.ignored_keys == ["capture_mode", "custom_containers", "enable_custom_container_tags"]
    assert provider.base_url == stub.url and provider.namespace_for("anyone") == "hermes_default"

    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"memory:\n  provider: supermemory\n  home: home\nsupermemory:\n  config_file: {hermes}\n"
                   "  container_tag: 'ironmem_{user_id}'\n  tools: [supermemory_search, supermemory_profile]\n")
    with manager_from_config(cfg) as manager:
        assert [t.name for t in manager.tool_schemas() if t.provider == "supermemory"] == [
            "supermemory_search", "supermemory_profile"]
        session = manager.start_session("cfg-1", user_id="yan")
        session.sync_turn("I collect vinyl records", "Nice.")
        session.end()
        entry = manager.status()["providers"][1]
        assert entry["config"]["ignored_keys"] == s.ignored_keys and KEY not in json.dumps(entry)
    assert ("ironmem_yan", "ironmem-session-cfg-1") in fake(stub).documents
    assert provider_class("supermemory") is SupermemoryProvider


def test_bad_settings_say_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown Supermemory tool"):
        SupermemoryProvider(api_key=KEY, tools=["supermemory_everything"])
    with pytest.raises(ConfigError, match="max_recall_results"):
        SupermemoryProvider(api_key=KEY, max_recall_results=0)
    broken = tmp_path / "supermemory.json"
    broken.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        SupermemoryProvider.from_hermes_config(broken, api_key=KEY)
    assert [t.name for t in SupermemoryProvider(api_key=KEY).tool_schemas()] == list(DEFAULT_SUPERMEMORY_TOOLS)


def test_cli_status_shows_masked_config_and_live_health(stub: StubServer, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    (tmp_path / "home").mkdir()  # inspecting never creates a home
    cfg.write_text(f"memory:\n  provider: supermemory\n  home: home\nsupermemory:\n  api_key: {KEY}\n"
                   f"  base_url: {stub.url}\n")
    code, out, err = cli_status(cfg, "--json", clear_env="SUPERMEMORY_")
    assert code == 0, err
    entry = next(p for p in json.loads(out)["providers"] if p["name"] == "supermemory")
    assert entry["state"] == "active" and entry["service"]["state"] == "ok" and KEY not in out
    stub.inject(Fault(429, {"error": "Too many requests"}, {"Retry-After": "120"}))
    code, out, err = cli_status(cfg, clear_env="SUPERMEMORY_")
    assert code == 0, err
    assert "degraded" in out and "rate limited" in out and "retry after 120s" in out


@pytest.mark.skipif(not os.environ.get("SUPERMEMORY_API_KEY"),
                    reason="set SUPERMEMORY_API_KEY to run against Supermemory's service")
def test_live_supermemory_round_trip(tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:10]
    provider = SupermemoryProvider(container_tag=f"ironmem_live_{run}_{{user_id}}", api_timeout=30.0)
    provider.initialize("live", user_id="u")
    provider.probe()
    doc = provider.store(f"The project codename is Bluefin{run}.", metadata={"type": "live_test"})
    assert doc
    hits = []
    for _ in range(20):  # Supermemory processes documents asynchronously
        hits = provider.search(f"What is the project codename Bluefin{run}?")
        if hits:
            break
        time.sleep(3)
    assert hits, "the stored document was not searchable within a minute"
    provider.shutdown()


def test_removed_builtin_notes_are_forgotten(stub: StubServer, tmp_path: Path) -> None:
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("s-rm", user_id="zoe")
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Zoe keeps bees"})
        assert manager.drain(10)
        assert json.loads(session.handle_tool_call("supermemory_search", {"query": "bees"}))["count"] == 1
        session.handle_tool_call("memory", {"action": "remove", "target": "user", "old_text": "keeps bees"})
        assert manager.drain(10)
        assert json.loads(session.handle_tool_call("supermemory_search", {"query": "bees"}))["count"] == 0
        session.end()
        assert manager.health("supermemory").state == "active", manager.health("supermemory").reason


def test_writes_unsent_at_shutdown_are_saved_and_sent_by_the_next_run(stub: StubServer, tmp_path: Path) -> None:
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("run-1", user_id="fay")
        stub.inject(Fault(503, {"error": "maintenance"}, operation=ADD, times=None))
        session.sync_turn("I am allergic to peanuts", "Noted.")
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Fay lives in Oslo"})
        session.end()
    saved = list((tmp_path / "home" / "supermemory").glob("unsent-*.jsonl"))
    assert len(saved) == 1 and len(saved[0].read_text().splitlines()) == 2
    stub.clear_faults()
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("run-2", user_id="fay")
        session.end()  # sends the saved writes even without a new one
        assert manager.health("supermemory").state == "active"
    assert not list((tmp_path / "home" / "supermemory").glob("*.jsonl"))
    memories = [m["memory"] for m in fake(stub).memories.values() if m["ns"] == "ironmem_fay"]
    assert memories == ["I am allergic to peanuts", "Noted.", "Fay lives in Oslo"]
