"""The OpenAPI-validating stub itself: what it accepts, what it flags, how faults are served."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openapi_schema_validator")

from ironmem.testing.hosted_fakes import honcho_stub, supermemory_stub
from ironmem.testing.openapi_stub import Fault, OpenAPIDescription, StubResponse, StubServer

DATA = Path(__file__).parent / "data" / "openapi"
AUTH = {"Authorization": "Bearer k"}


@pytest.fixture
def honcho() -> StubServer:
    with honcho_stub(DATA / "honcho-v3.openapi.json") as stub:
        yield stub


def test_query_parameters_are_typed_and_declared(honcho: StubServer) -> None:
    base = f"{honcho.url}/v3/workspaces/w/peers/p/context"
    assert httpx.get(base, params={"search_query": "x", "search_top_k": "3"}, headers=AUTH).status_code == 200
    assert honcho.violations == []
    wrong = httpx.get(base, params={"search_top_k": "many"}, headers=AUTH)
    assert wrong.status_code == 400 and "query parameter search_top_k" in json.dumps(wrong.json())
    unknown = httpx.get(base, params={"serch_query": "x"}, headers=AUTH)
    assert unknown.status_code == 400 and "'serch_query' is not in the description" in json.dumps(unknown.json())
    out_of_range = httpx.get(base, params={"search_top_k": "500"}, headers=AUTH)
    assert out_of_range.status_code == 400
    assert len(honcho.violations) == 3


def test_bodies_methods_and_paths(honcho: StubServer) -> None:
    missing = httpx.post(f"{honcho.url}/v3/workspaces/w/peers", headers=AUTH)
    assert missing.status_code == 400 and "requires a request body" in json.dumps(missing.json())
    not_json = httpx.post(f"{honcho.url}/v3/workspaces/w/peers", content=b"{x", headers={**AUTH, "Content-Type": "application/json"})
    assert not_json.status_code == 400 and "not JSON" in json.dumps(not_json.json())
    wrong_method = httpx.get(f"{honcho.url}/v3/workspaces/w/peers", headers=AUTH)
    assert wrong_method.status_code == 404 and "allows POST" in wrong_method.json()["error"]
    too_many = httpx.post(f"{honcho.url}/v3/workspaces/w/sessions/s/messages", headers=AUTH,
                          json={"messages": [{"content": "x", "peer_id": "p"}] * 101})
    assert too_many.status_code == 400 and "is too long" in json.dumps(too_many.json())
    assert len(honcho.violations) == 4


def test_delete_bodies_are_validated_too() -> None:
    with supermemory_stub(DATA / "supermemory-v5.openapi.json") as stub:
        empty = httpx.request("DELETE", f"{stub.url}/ns/alice/memories", json={"ids": []}, headers=AUTH)
        assert empty.status_code == 400 and "should be non-empty" in json.dumps(empty.json())
        ok = httpx.request("DELETE", f"{stub.url}/ns/alice/memories", json={"ids": ["m1"]}, headers=AUTH)
        assert ok.status_code == 200 and ok.json()["errors"][0]["id"] == "m1"
        assert len(stub.violations) == 1


def test_faults_by_operation_in_order_and_counted(honcho: StubServer) -> None:
    honcho.inject(Fault(503, {"detail": "a"}, operation="get_or_create_peer_v3_workspaces__workspace_id__peers_post",
                        times=2))
    honcho.inject(Fault(429, {"detail": "b"}, {"Retry-After": "3"}))
    ws = httpx.post(f"{honcho.url}/v3/workspaces", json={"id": "w"}, headers=AUTH)
    assert ws.status_code == 429 and ws.headers["retry-after"] == "3"  # the first fault that applies
    codes = [httpx.post(f"{honcho.url}/v3/workspaces/w/peers", json={"id": "p"}, headers=AUTH).status_code
             for _ in range(3)]
    assert codes == [503, 503, 200]
    assert [e.fault for e in honcho.calls()] == [True, True, True, False]


def test_a_handler_answer_that_breaks_the_description_is_recorded() -> None:
    spec = OpenAPIDescription(DATA / "honcho-v3.openapi.json")
    with StubServer(spec, lambda req: StubResponse(200, {"id": "w"})) as stub:  # no created_at
        httpx.post(f"{stub.url}/v3/workspaces", json={"id": "w"}, headers=AUTH)
        assert stub.violations == ["POST /v3/workspaces: response 200 body: 'created_at' is a required property (required)"]
    with StubServer(spec, lambda req: StubResponse(201, {"id": "w"})) as stub:  # undocumented success status
        httpx.post(f"{stub.url}/v3/workspaces", json={"id": "w"}, headers=AUTH)
        assert "status 201 is not documented" in stub.violations[0]


def test_only_openapi_31_descriptions() -> None:
    with pytest.raises(ValueError, match="only OpenAPI 3.1"):
        OpenAPIDescription({"openapi": "3.0.3", "paths": {}})
