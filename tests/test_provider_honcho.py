"""HonchoProvider on the real honcho-ai SDK against a loopback stub of Honcho's API v3.

Every request the SDK sends is validated against the vendored ``docs/v3/openapi.json`` (tests/data/openapi), and
every answer of the stub against the same file; each test ends by asserting the stub saw no violation.

Live check against Honcho Cloud (skipped without a key), one command:

    HONCHO_API_KEY=... python -m pytest tests/test_provider_honcho.py -k live -v
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

pytest.importorskip("honcho")

from servers import HostedScenarios, checked_stub, cli_status, hosted_manager, provider_status, vendored_spec

from ironmem import MemoryManager
from ironmem.core.config import load_config, manager_from_config, provider_class
from ironmem.core.errors import ConfigError
from ironmem.providers.honcho import DEFAULT_HONCHO_TOOLS, HONCHO_TOOLS, HonchoProvider
from ironmem.testing.hosted_fakes import HonchoFake, honcho_stub
from ironmem.testing.openapi_stub import Fault, StubServer

SPEC = vendored_spec("honcho-v3.openapi.json", "Honcho")
KEY = "hch-test-0123456789abcdef"
ADD_MESSAGES = "create_messages_for_session_v3_workspaces__workspace_id__sessions__session_id__messages_post"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    yield from checked_stub(honcho_stub(SPEC, api_key=KEY), "Honcho")


def make(stub: StubServer, **options: object) -> HonchoProvider:
    options.setdefault("api_key", KEY)
    options.setdefault("timeout", 3.0)
    return HonchoProvider(base_url=stub.url, **options)


def fake(stub: StubServer) -> HonchoFake:
    assert isinstance(stub.handler, HonchoFake)
    return stub.handler


# --------------------------------------------------------------------------------------------------
# The provider contract and the scenarios every hosted provider passes (tests/servers.py), against the stub
# --------------------------------------------------------------------------------------------------
class TestHoncho(HostedScenarios):
    key_env = "HONCHO_API_KEY"
    wrong_key = "hch-wrong-key-000000000"
    search_tool = "honcho_search"
    add_operation = ADD_MESSAGES
    rate_limit_body = {"detail": "slow down"}

    def make(self, stub: StubServer, **options: object) -> HonchoProvider:
        return make(stub, **options)

    def user_turns(self, stub: StubServer, user: str) -> list[str]:
        return [m["content"] for m in fake(stub).messages if m["peer_id"] == user]


# --------------------------------------------------------------------------------------------------
# Every request validates, and the validation has teeth
# --------------------------------------------------------------------------------------------------
def test_every_hook_and_tool_sends_requests_that_validate(stub: StubServer, tmp_path: Path) -> None:
    provider = make(stub, tools=list(HONCHO_TOOLS))
    provider.initialize("s-1", user_id="alice")
    provider.sync_turn("I moved to Lyon last spring", "Lyon is lovely.", session_id="s-1")
    provider.on_memory_write("add", "user", "Alice lives in Lyon")
    assert any("Lyon" in item for item in provider.prefetch("Where do I live, Lyon?", session_id="s-1"))
    results = {name: json.loads(provider.handle_tool_call(name, args)) for name, args in (
        ("honcho_search", {"query": "Lyon", "limit": 3}),
        ("honcho_profile", {}),
        ("honcho_context", {"query": "Lyon"}),
        ("honcho_reasoning", {"query": "Where does Alice live?"}),
        ("honcho_conclude", {"content": "Alice prefers trains"}),
    )}
    assert all(r["success"] for r in results.values()), results
    assert "Lyon" in results["honcho_search"]["results"][0]["content"]
    assert "Lyon" in results["honcho_reasoning"]["answer"]
    created = results["honcho_conclude"]["created"][0]["id"]
    deleted = json.loads(provider.handle_tool_call("honcho_conclude", {"delete_id": created}))
    assert deleted == {"success": True, "deleted": created}
    assert created not in fake(stub).conclusions
    provider.on_session_end("s-1")
    provider.probe()
    provider.shutdown()
    used = {e.operation_id for e in stub.calls()}
    for fragment in ("get_or_create_workspace", "get_or_create_peer", "get_or_create_session",
                     "create_messages_for_session", "search_peer", "get_peer_card", "get_peer_context", "chat",
                     "create_conclusions", "delete_conclusion"):
        assert any(op and fragment in op for op in used), f"{fragment} was never called: {sorted(used)}"
    assert all(e.problems == [] for e in stub.calls())


def test_the_stub_rejects_requests_and_answers_that_break_the_description(stub: StubServer) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    bad_id = httpx.post(f"{stub.url}/v3/workspaces/ironmem/peers", json={"id": "has spaces"}, headers=headers)
    assert bad_id.status_code == 400
    assert "does not match" in json.dumps(bad_id.json()["problems"])
    no_query = httpx.post(f"{stub.url}/v3/workspaces/w/peers/p/search", json={"limit": 5}, headers=headers)
    assert no_query.status_code == 400 and "'query' is a required property" in json.dumps(no_query.json())
    unknown = httpx.get(f"{stub.url}/v3/nowhere", headers=headers)
    assert unknown.status_code == 404
    assert len(stub.violations) == 3
    stub.reset_records()

    original = stub.handler

    def wrong_shape(req):  # a fake that answers a peer without its required fields
        from ironmem.testing.openapi_stub import StubResponse
        return StubResponse(200, {"id": 42}) if "peers" in req.path else original(req)

    stub.handler = wrong_shape
    httpx.post(f"{stub.url}/v3/workspaces/w/peers", json={"id": "p"}, headers=headers)
    assert any("response 200 body" in v for v in stub.violations)
    stub.reset_records()


# --------------------------------------------------------------------------------------------------
# Failures: the turn goes on, status explains
# --------------------------------------------------------------------------------------------------
def test_429_during_recall_keeps_the_turn_fast_and_says_so(stub: StubServer, tmp_path: Path) -> None:
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("s-rl", user_id="carol")
        stub.inject(Fault(429, {"detail": "rate limit"}, {"Retry-After": "60"}, times=None))
        started = time.perf_counter()
        session.prefetch("anything?")
        session.prefetch("anything else?")
        assert time.perf_counter() - started < 3.0  # no SDK sleep for 60 s
        entry = provider_status(manager, "honcho")
        assert entry["state"] == "degraded" and "rate limited" in entry["reason"]
        assert entry["service"]["state"] == "rate_limited" and entry["service"]["retry_after_s"] > 50
        stub.clear_faults()
        session.end()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(500, {"detail": "boom"}), "HTTP 500"),
        (Fault(200, raw=b"{this is not json"), "does not parse"),
        (Fault(drop=True), "could not connect"),
        (Fault(None, delay=3.0), "no answer within 0.5s"),
    ],
    ids=["server-error", "malformed-body", "dropped-connection", "timeout"],
)
def test_failures_degrade_then_recover(stub: StubServer, tmp_path: Path, fault: Fault, expected: str) -> None:
    # the short timeout only where the fault is a delay: elsewhere the recovery request must not race a busy
    # machine (a CI run once saw the recovery search of the malformed-body case pass 0.5 s)
    provider = make(stub, timeout=0.5) if fault.delay else make(stub)
    with hosted_manager(tmp_path, provider) as manager:
        session = manager.start_session("s-f", user_id="dave")
        session.sync_turn("My dog is called Rex", "Nice name.")
        assert manager.drain(10)
        stub.inject(Fault(**{**fault.__dict__, "times": 2}))  # recall makes two requests
        started = time.perf_counter()
        session.prefetch("What is my dog called?")
        assert time.perf_counter() - started < 4.0
        entry = provider_status(manager, "honcho")
        assert entry["state"] == "degraded" and expected in entry["reason"], entry
        stub.clear_faults()
        recall = session.prefetch("What is my dog called?")
        assert any("Rex" in item.text for item in recall.items if item.source == "honcho")
        assert provider_status(manager, "honcho")["state"] == "active"
        session.end()


# --------------------------------------------------------------------------------------------------
# Egress redaction
# --------------------------------------------------------------------------------------------------
def test_secrets_are_masked_before_they_reach_honcho(stub: StubServer, tmp_path: Path) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("s-sec", user_id="erin")
        session.sync_turn(f"my OpenAI key is {secret}", "I will not repeat it.")
        session.handle_tool_call("honcho_conclude", {"content": f"Erin's key is {secret}"})
        session.prefetch(f"what is {secret} for?")
        session.end()
    sent = json.dumps([e.body for e in stub.calls()])
    assert secret not in sent
    assert "my OpenAI key is" in sent  # the rest of the text did go out


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------
def test_missing_key_is_a_clear_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HONCHO_API_KEY", raising=False)
    monkeypatch.delenv("IRONMEM_HONCHO_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="HONCHO_API_KEY"):
        HonchoProvider()
    cfg = tmp_path / "config.yaml"
    cfg.write_text("memory:\n  provider: honcho\nhoncho:\n  workspace: w\n")
    with pytest.raises(ConfigError, match="HONCHO_API_KEY"):
        load_config(cfg)
    assert HonchoProvider(base_url="http://localhost:8000").is_available()  # a local server needs no key


def test_key_from_environment_and_masked_in_status(monkeypatch: pytest.MonkeyPatch, stub: StubServer) -> None:
    monkeypatch.setenv("HONCHO_API_KEY", KEY)
    provider = HonchoProvider(base_url=stub.url)
    provider.probe()
    info = provider.status_info()
    assert KEY not in json.dumps(info) and info["config"]["api_key"].endswith(KEY[-4:])
    assert info["service"]["state"] == "ok"
    provider.shutdown()


def test_hermes_honcho_json_host_block_and_yaml_section(monkeypatch: pytest.MonkeyPatch, stub: StubServer,
                                                        tmp_path: Path) -> None:
    monkeypatch.delenv("HONCHO_API_KEY", raising=False)
    hermes = tmp_path / "honcho.json"
    hermes.write_text(json.dumps({
        "apiKey": KEY, "workspace": "hermes", "peerName": "yourname", "contextCadence": 2, "dialecticDepth": 2,
        "hosts": {"hermes": {"aiPeer": "hermes-ai", "recallMode": "auto", "saveMessages": True,
                             "observation": {"user": {"observeMe": True}}},
                  "hermes_coder": {"aiPeer": "coder", "recallMode": "tools"}},
    }), encoding="utf-8")
    provider = HonchoProvider.from_hermes_config(hermes, base_url=stub.url)
    s = provider.settings
    assert (s.workspace, s.peer_name, s.ai_peer, s.recall_mode) == ("hermes", "yourname", "hermes-ai", "hybrid")
    assert s.ignored_keys == ["contextCadence", "dialecticDepth", "observation"]
    coder = HonchoProvider.from_hermes_config(hermes, host="hermes_coder", base_url=stub.url)
    assert coder.settings.ai_peer == "coder" and coder.settings.recall_mode == "tools"
    assert coder.prefetch("anything", session_id="x") == []  # tools mode: no automatic recall

    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"memory:\n  provider: honcho\n  home: home\nhoncho:\n  config_file: {hermes}\n"
                   f"  base_url: {stub.url}\n  aiPeer: from-yaml\n  tools: [honcho_search, honcho_reasoning]\n")
    config = load_config(cfg)
    assert config.provider_settings.ai_peer == "from-yaml"  # the yaml section wins over the file
    assert config.provider_settings.workspace == "hermes"
    with manager_from_config(cfg) as manager:
        assert [t.name for t in manager.tool_schemas() if t.provider == "honcho"] == ["honcho_search", "honcho_reasoning"]
        session = manager.start_session("cfg-1", user_id="yourname")
        session.sync_turn("I collect vinyl records", "Nice.")
        session.end()
        assert manager.status()["providers"][1]["config"]["ignored_keys"] == s.ignored_keys
    assert any(m["peer_id"] == "yourname" and "vinyl" in m["content"] for m in fake(stub).messages)


def test_bad_settings_say_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown Honcho tool"):
        HonchoProvider(api_key=KEY, tools=["honcho_search", "honcho_everything"])
    broken = tmp_path / "honcho.json"
    broken.write_text('{"apiKey": "x",', encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        HonchoProvider.from_hermes_config(broken)
    with pytest.raises(ConfigError, match="does not exist"):
        HonchoProvider.from_hermes_config(tmp_path / "missing.json")
    assert provider_class("honcho") is HonchoProvider  # registered without reinstalling the package
    assert [t.name for t in HonchoProvider(api_key=KEY).tool_schemas()] == list(DEFAULT_HONCHO_TOOLS)
    assert HonchoProvider(api_key=KEY, recallMode="context").tool_schemas() == []


# --------------------------------------------------------------------------------------------------
# `ironmem status` shows configuration and health
# --------------------------------------------------------------------------------------------------
def test_cli_status_shows_masked_config_and_live_health(stub: StubServer, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    (tmp_path / "home").mkdir()  # inspecting never creates a home
    cfg.write_text(f"memory:\n  provider: honcho\n  home: home\nhoncho:\n  api_key: {KEY}\n  base_url: {stub.url}\n")
    code, out, err = cli_status(cfg, "--json", clear_env="HONCHO_")
    assert code == 0, err
    entry = next(p for p in json.loads(out)["providers"] if p["name"] == "honcho")
    assert entry["state"] == "active" and entry["service"]["state"] == "ok"
    assert entry["config"]["workspace"] == "ironmem" and KEY not in out

    cfg.write_text(f"memory:\n  provider: honcho\n  home: home\nhoncho:\n  api_key: hch-wrong-0000000000\n"
                   f"  base_url: {stub.url}\n")
    code, out, err = cli_status(cfg, clear_env="HONCHO_")
    assert code == 0, err
    assert "degraded" in out and "HONCHO_API_KEY" in out and "hch-wrong-0000000000" not in out
    code, out, _ = cli_status(cfg, "--json", "--no-probe", clear_env="HONCHO_")
    entry = next(p for p in json.loads(out)["providers"] if p["name"] == "honcho")
    assert entry["service"]["state"] == "not contacted yet"


# --------------------------------------------------------------------------------------------------
# The real service
# --------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not os.environ.get("HONCHO_API_KEY"), reason="set HONCHO_API_KEY to run against Honcho Cloud")
def test_live_honcho_round_trip(tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:10]
    provider = HonchoProvider(workspace=f"ironmem-live-{run}", timeout=30.0,
                              base_url=os.environ.get("HONCHO_BASE_URL") or None)
    provider.probe()
    with MemoryManager(home=tmp_path, external=provider, prefetch_timeout=30) as manager:
        session = manager.start_session(f"live-{run}", user_id=f"user-{run}")
        session.sync_turn(f"My project codename is Bluefin{run}", "Noted.")
        session.end()
        assert manager.health("honcho").state == "active", manager.health("honcho").reason
    hits = []
    for _ in range(10):  # Honcho indexes messages asynchronously
        hits = provider.search(f"Bluefin{run}", user=f"user-{run}")
        if hits:
            break
        time.sleep(3)
    assert any(f"Bluefin{run}" in h["content"] for h in hits)
    provider.shutdown()


def test_long_messages_odd_ids_and_removed_notes(stub: StubServer, tmp_path: Path) -> None:
    provider = make(stub)
    with hosted_manager(tmp_path, provider) as manager:
        session = manager.start_session("thread/42 ü", user_id="zoë@example.com")
        long_text = "word " * 12_000  # 60,000 chars: Honcho takes at most 25,000 per message
        session.sync_turn(long_text, "short answer")
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Zoë keeps bees"})
        assert manager.drain(10)
        assert any("Zoë keeps bees" == c["content"] for c in fake(stub).conclusions.values())
        session.handle_tool_call("memory", {"action": "remove", "target": "user", "old_text": "keeps bees"})
        assert manager.drain(10)
        assert not any("bees" in c["content"] for c in fake(stub).conclusions.values())
        session.end()
        assert manager.health("honcho").state == "active", manager.health("honcho").reason
    chunks = [m["content"] for m in fake(stub).messages if m["content"].startswith("word")]
    assert [len(c) for c in chunks] == [25000, 25000, 9999]  # split, nothing lost (the text is stripped)
    peers = {m["peer_id"] for m in fake(stub).messages}
    assert len(peers) == 2 and all(p.replace("_", "").replace("-", "").isalnum() for p in peers)


def test_writes_unsent_at_shutdown_are_saved_and_sent_by_the_next_run(stub: StubServer, tmp_path: Path) -> None:
    with hosted_manager(tmp_path, make(stub)) as manager:
        session = manager.start_session("run-1", user_id="fay")
        stub.inject(Fault(429, {"detail": "slow down"}, {"Retry-After": "60"}, operation=ADD_MESSAGES, times=None))
        session.sync_turn("I am allergic to peanuts", "Noted.")
        session.sync_turn("I live in Oslo", "Noted.")
        session.end()
        assert provider_status(manager, "honcho")["writes"]["pending"] == 2
    saved = list((tmp_path / "home" / "honcho").glob("unsent-*.jsonl"))
    assert len(saved) == 1 and len(saved[0].read_text().splitlines()) == 2
    stub.clear_faults()
    with hosted_manager(tmp_path, make(stub)) as manager:  # a new process on the same home
        session = manager.start_session("run-2", user_id="fay")
        session.sync_turn("I take the train to work", "Noted.")
        session.end()
        assert manager.health("honcho").state == "active"
    assert not list((tmp_path / "home" / "honcho").glob("*.jsonl"))
    said = [m["content"] for m in fake(stub).messages if m["peer_id"] == "fay"]
    assert said == ["I am allergic to peanuts", "I live in Oslo", "I take the train to work"]
    assert [m["session_id"] for m in fake(stub).messages if m["peer_id"] == "fay"] == ["run-1", "run-1", "run-2"]
