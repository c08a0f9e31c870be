"""A loopback HTTP stub of a hosted service that checks every exchange against the service's OpenAPI description.

Hosted memory services (Honcho, Supermemory) cannot run on a test machine, but their official SDKs can: point
the SDK at a :class:`StubServer` on ``127.0.0.1`` and the SDK sends its real HTTP requests over a real socket.
The stub

1. matches each request to an operation of the description (method and path template),
2. validates the path and query parameters and the JSON request body against that operation's schemas
   (JSON Schema 2020-12 / OpenAPI 3.1 dialect, through ``openapi-schema-validator`` and ``jsonschema``),
3. asks a handler (an in-memory fake of the service) for the answer, and validates that answer against the
   operation's response schema for its status code,
4. or, when a :class:`Fault` is queued, answers with the fault instead: any status with headers (401, 429 with
   ``Retry-After``, 500), a delay longer than the client's timeout, a malformed body, or a dropped connection.

A request that does not match the description is answered ``400`` with the problems listed, and recorded in
:attr:`StubServer.violations`, so a test both sees the failure and can assert ``stub.violations == []``.

Example:
    >>> import httpx, json, pathlib
    >>> spec = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {"/echo/{name}": {"post": {
    ...     "operationId": "echo",
    ...     "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
    ...     "requestBody": {"required": True, "content": {"application/json": {"schema": {
    ...         "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}},
    ...     "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {
    ...         "type": "object", "required": ["name"]}}}}}}}}}
    >>> with StubServer(OpenAPIDescription(spec), lambda req: StubResponse(200, {"name": req.path_params["name"]})) as stub:
    ...     good = httpx.post(stub.url + "/echo/ada", json={"n": 1}).json()
    ...     bad = httpx.post(stub.url + "/echo/ada", json={"n": "one"}).status_code
    >>> good, bad, len(stub.violations)
    ({'name': 'ada'}, 400, 1)
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "Fault",
    "OpenAPIDescription",
    "Operation",
    "RecordedExchange",
    "StubRequest",
    "StubResponse",
    "StubServer",
]

log = logging.getLogger(__name__)

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_SPEC_URI = "urn:ironmem:openapi-description"


def _escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Operation:
    """One operation of the description: ``POST /v3/workspaces/{workspace_id}/peers``."""

    method: str
    template: str
    operation_id: str
    pointer: str  # JSON pointer of the operation object inside the description
    parameters: tuple[dict[str, Any], ...]
    request_body: dict[str, Any] | None
    responses: dict[str, Any]
    secured: bool

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.template}"


class OpenAPIDescription:
    """An OpenAPI 3.1 description loaded for request/response validation.

    ``source`` is a path to the JSON file or the already-parsed document.
    """

    def __init__(self, source: str | Path | dict[str, Any]) -> None:
        try:
            from openapi_schema_validator import OAS31Validator
            from referencing import Registry, Resource
            from referencing.jsonschema import DRAFT202012
        except ImportError as exc:
            raise ImportError(
                f"the OpenAPI stub needs openapi-schema-validator and jsonschema ({exc}): pip install 'ironmem[dev]'"
            ) from exc

        if isinstance(source, dict):
            self.document = source
            self.source = "<dict>"
        else:
            path = Path(source)
            self.document = json.loads(path.read_text(encoding="utf-8"))
            self.source = str(path)
        version = str(self.document.get("openapi", ""))
        if not version.startswith("3.1"):
            raise ValueError(f"{self.source}: only OpenAPI 3.1 descriptions are supported, this one is {version!r}")
        self._validator_cls = OAS31Validator
        resource = Resource.from_contents(self.document, default_specification=DRAFT202012)
        self._registry = Registry().with_resource(_SPEC_URI, resource)
        self._validators: dict[str, Any] = {}
        self._lock = threading.Lock()
        global_security = self.document.get("security")
        self.operations: list[Operation] = []
        for template, item in (self.document.get("paths") or {}).items():
            shared = [self._deref(p) for p in item.get("parameters", [])]
            for method in _METHODS:
                op = item.get(method)
                if not isinstance(op, dict):
                    continue
                own = [self._deref(p) for p in op.get("parameters", [])]
                names = {(p.get("name"), p.get("in")) for p in own}
                params = tuple(own + [p for p in shared if (p.get("name"), p.get("in")) not in names])
                body = self._deref(op["requestBody"]) if "requestBody" in op else None
                security = op.get("security", global_security)
                self.operations.append(Operation(
                    method=method,
                    template=template,
                    operation_id=str(op.get("operationId") or f"{method} {template}"),
                    pointer=f"/paths/{_escape_pointer(template)}/{method}",
                    parameters=params,
                    request_body=body,
                    responses=dict(op.get("responses") or {}),
                    secured=any(bool(s) for s in (security or [])),
                ))
        self._matchers = [(self._compile(op.template), op) for op in self.operations]

    # -- lookup ----------------------------------------------------------------------------------
    def _deref(self, obj: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while isinstance(obj, dict) and "$ref" in obj and seen < 20:
            ref = obj["$ref"]
            if not ref.startswith("#/"):
                raise ValueError(f"{self.source}: only local references are supported, got {ref!r}")
            target: Any = self.document
            for token in ref[2:].split("/"):
                target = target[token.replace("~1", "/").replace("~0", "~")]
            obj = target
            seen += 1
        return obj

    @staticmethod
    def _compile(template: str) -> tuple[re.Pattern[str], int]:
        parts = re.split(r"(\{[^}/]+\})", template)
        regex = "".join(f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") else re.escape(p) for p in parts)
        literal = sum(len(p) for p in parts if not p.startswith("{"))
        return re.compile(f"^{regex}$"), literal

    def match(self, method: str, path: str) -> tuple[Operation | None, dict[str, str], list[str]]:
        """The operation for ``method path`` and its path parameters; ``(None, {}, allowed_methods)`` if none."""
        method = method.lower()
        best: tuple[int, Operation, dict[str, str]] | None = None
        allowed: list[str] = []
        for (regex, literal), op in self._matchers:
            m = regex.match(path)
            if not m:
                continue
            if op.method != method:
                allowed.append(op.method.upper())
                continue
            if best is None or literal > best[0]:
                best = (literal, op, {k: unquote(v) for k, v in m.groupdict().items()})
        if best is None:
            return None, {}, sorted(set(allowed))
        return best[1], best[2], []

    def _validator(self, pointer: str) -> Any:
        with self._lock:
            validator = self._validators.get(pointer)
            if validator is None:
                schema = {"$ref": f"{_SPEC_URI}#{pointer}"}
                validator = self._validator_cls(
                    schema, registry=self._registry, format_checker=self._validator_cls.FORMAT_CHECKER
                )
                self._validators[pointer] = validator
            return validator

    def _schema_problems(self, pointer: str, value: Any, where: str) -> list[str]:
        problems = []
        for error in sorted(self._validator(pointer).iter_errors(value), key=lambda e: list(e.absolute_path)):
            loc = "".join(f"[{p!r}]" for p in error.absolute_path)
            text = error.message  # starts with the (possibly huge) instance; keep both ends
            if len(text) > 300:
                text = f"{text[:120]} ... {text[-150:]}"
            problems.append(f"{where}{loc}: {text} ({error.validator})")
        return problems

    # -- validation ------------------------------------------------------------------------------
    def validate_request(
        self, op: Operation, path_params: dict[str, str], query: dict[str, list[str]], headers: dict[str, str],
        body: bytes,
    ) -> tuple[list[str], Any]:
        """Problems with one request (empty when it conforms) and the parsed JSON body."""
        problems: list[str] = []
        declared_query = set()
        for index, param in enumerate(op.parameters):
            name, where = str(param.get("name")), param.get("in")
            ptr = self._param_pointer(op, param, index)
            if where == "path":
                if name not in path_params:
                    problems.append(f"path parameter {name!r} missing")
                    continue
                problems += self._schema_problems(ptr, self._coerce(param, path_params[name]), f"path parameter {name}")
            elif where == "query":
                declared_query.add(name)
                values = query.get(name)
                if values is None:
                    if param.get("required"):
                        problems.append(f"required query parameter {name!r} missing")
                    continue
                value: Any = values if self._is_array(param) else values[-1]
                problems += self._schema_problems(ptr, self._coerce(param, value), f"query parameter {name}")
            elif where == "header" and param.get("required") and name.lower() not in headers:
                problems.append(f"required header {name!r} missing")
        for name in query:
            if name not in declared_query:
                problems.append(f"query parameter {name!r} is not in the description of {op}")
        parsed: Any = None
        if body:
            ctype = headers.get("content-type", "")
            if "json" not in ctype:
                problems.append(f"request body sent as {ctype or 'no content type'}, expected application/json")
            try:
                parsed = json.loads(body)
            except ValueError as exc:
                problems.append(f"request body is not JSON: {exc}")
                return problems, None
        if op.request_body is None:
            if body and parsed not in (None, {}):
                problems.append(f"{op} takes no request body, but one was sent")
            return problems, parsed
        content = op.request_body.get("content") or {}
        if not body:
            if op.request_body.get("required"):
                problems.append(f"{op} requires a request body")
            return problems, parsed
        if "application/json" in content and "schema" in content["application/json"]:
            ptr = self._body_pointer(op)
            problems += self._schema_problems(ptr, parsed, "request body")
        return problems, parsed

    def validate_response(self, op: Operation, status: int, body: Any, *, has_body: bool) -> list[str]:
        """Problems with a response the stub is about to send (empty when it conforms)."""
        key = str(status)
        if key not in op.responses:
            wildcard = f"{key[0]}XX"
            key = wildcard if wildcard in op.responses else "default" if "default" in op.responses else ""
        if not key:
            if status >= 400:
                # OpenAPI: responses "need not cover all possible HTTP response codes"; an undocumented error
                # status (a 401 from the auth layer, a 429 from a gateway) is not constrained by the description.
                return []
            return [f"status {status} is not documented for {op} (documented: {', '.join(op.responses)})"]
        response = self._deref(op.responses[key])
        content = response.get("content") or {}
        if "application/json" not in content or "schema" not in content["application/json"]:
            return []
        if not has_body:
            return [f"{op} answers {status} with a JSON body, but the stub sent none"]
        ptr = f"{op.pointer}/responses/{_escape_pointer(key)}/content/application~1json/schema"
        if "$ref" in op.responses[key]:
            ref = op.responses[key]["$ref"]
            ptr = ref[1:] + "/content/application~1json/schema"
        return self._schema_problems(ptr, body, f"response {status} body")

    def _body_pointer(self, op: Operation) -> str:
        raw = self._deref_raw(op.pointer + "/requestBody")
        if isinstance(raw, dict) and "$ref" in raw:
            return raw["$ref"][1:] + "/content/application~1json/schema"
        return op.pointer + "/requestBody/content/application~1json/schema"

    def _param_pointer(self, op: Operation, param: dict[str, Any], index: int) -> str:
        # Parameters may come from the operation, the path item or a $ref; find where this one's schema lives.
        for base in (op.pointer, op.pointer.rsplit("/", 1)[0]):
            raw_list = self._deref_raw(base + "/parameters")
            if not isinstance(raw_list, list):
                continue
            for i, raw in enumerate(raw_list):
                resolved = self._deref(raw) if isinstance(raw, dict) else raw
                if resolved is param or (resolved.get("name"), resolved.get("in")) == (param.get("name"), param.get("in")):
                    if isinstance(raw, dict) and "$ref" in raw:
                        return raw["$ref"][1:] + "/schema"
                    return f"{base}/parameters/{i}/schema"
        raise KeyError(f"parameter {param.get('name')!r} of {op} not found in the description")

    def _deref_raw(self, pointer: str) -> Any:
        target: Any = self.document
        for token in pointer.lstrip("/").split("/"):
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, list):
                target = target[int(token)]
            elif isinstance(target, dict) and token in target:
                target = target[token]
            else:
                return None
        return target

    def _is_array(self, param: dict[str, Any]) -> bool:
        schema = self._deref(param.get("schema") or {})
        types = schema.get("type")
        if types == "array" or (isinstance(types, list) and "array" in types):
            return True
        return any(self._deref(s).get("type") == "array" for s in schema.get("anyOf", []) + schema.get("oneOf", []))

    def _coerce(self, param: dict[str, Any], value: Any) -> Any:
        """Turn the text of a path/query value into the JSON type its schema wants (what a server framework does)."""
        schema = self._deref(param.get("schema") or {})
        candidates = [schema] + [self._deref(s) for s in schema.get("anyOf", []) + schema.get("oneOf", [])]
        types: list[str] = []
        for candidate in candidates:
            t = candidate.get("type")
            types += t if isinstance(t, list) else [t] if t else []
        if isinstance(value, list):
            item_schema = next((self._deref(c.get("items") or {}) for c in candidates if c.get("type") == "array"), {})
            return [self._coerce({"schema": item_schema}, v) for v in value]
        if "string" in types:
            return value
        for kind, convert in (("integer", int), ("number", float)):
            if kind in types:
                try:
                    return convert(value)
                except ValueError:
                    pass
        if "boolean" in types and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if "null" in types and value in ("", "null"):
            return None
        return value


# --------------------------------------------------------------------------------------------------
# Exchanges
# --------------------------------------------------------------------------------------------------
@dataclass
class StubRequest:
    """A validated request handed to the handler."""

    method: str
    path: str
    operation: Operation
    path_params: dict[str, str]
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    @property
    def bearer(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None


@dataclass
class StubResponse:
    """What the handler answers: a status, a JSON body (None for no body) and extra headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Fault:
    """A failure to answer with instead of calling the handler.

    ``status``/``body``/``headers``: answer this (``429`` with ``{"Retry-After": "7"}``, ``401``, ``500``);
    ``status=None``: answer what the handler answers (with ``delay``, a slow server).
    ``delay``: wait this many seconds first (longer than the client's timeout makes it time out).
    ``conform``: False for a deliberately wrong answer (the stub then does not check it against the description).
    ``raw``: send these bytes as the body verbatim (a malformed answer); ``drop``: close the connection unanswered.
    ``operation``: only requests of this operationId (or ``"METHOD /template"``) take the fault; ``times``: how
    many requests take it (``None``: every one until :meth:`StubServer.clear_faults`).
    """

    status: int | None = 500
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    conform: bool = True
    raw: bytes | None = None
    drop: bool = False
    operation: str | None = None
    times: int | None = 1

    def applies(self, op: Operation) -> bool:
        return self.operation is None or self.operation in (op.operation_id, str(op))


@dataclass
class RecordedExchange:
    """One request as the stub saw it, and what it answered."""

    method: str
    path: str
    operation_id: str | None
    body: Any
    query: dict[str, list[str]]
    status: int
    problems: list[str]
    fault: bool = False


Handler = Callable[[StubRequest], StubResponse]


class StubServer:
    """A threaded HTTP server on ``127.0.0.1`` (a free port) that validates traffic against a description.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``url`` is the base URL to give the SDK.
    """

    def __init__(self, description: OpenAPIDescription, handler: Handler, *, host: str = "127.0.0.1") -> None:
        self.description = description
        self.handler = handler
        self.host = host
        self.exchanges: list[RecordedExchange] = []
        self.violations: list[str] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stub server is not running; call start() or use it as a context manager")
        port = self._server.server_address[1]
        return f"http://{self.host}:{port}"

    def start(self) -> StubServer:
        if self._server is not None:
            return self
        stub = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("stub %s: " + format, stub.host, *args)

            def _serve(self) -> None:
                stub._serve(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self._stopping.clear()
        self._server = ThreadingHTTPServer((self.host, 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="ironmem-openapi-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes handlers waiting on a delay fault
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------------------------------
    def inject(self, fault: Fault) -> None:
        """Queue ``fault``; faults are taken in the order they were queued."""
        with self._lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, op: Operation) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.applies(op):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    # -- queries ---------------------------------------------------------------------------------
    def calls(self, operation: str | None = None) -> list[RecordedExchange]:
        """Recorded exchanges, optionally only those of one operationId or ``"METHOD /template"``."""
        with self._lock:
            items = list(self.exchanges)
        if operation is None:
            return items
        return [e for e in items if e.operation_id == operation or f"{e.method} {e.path}" == operation]

    def reset_records(self) -> None:
        with self._lock:
            self.exchanges.clear()
            self.violations.clear()

    # -- serving ---------------------------------------------------------------------------------
    def _record(self, exchange: RecordedExchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)
            self.violations.extend(f"{exchange.method} {exchange.path}: {p}" for p in exchange.problems)

    def _serve(self, http: BaseHTTPRequestHandler) -> None:
        method = http.command.upper()
        split = urlsplit(http.path)
        path = split.path
        query = parse_qs(split.query, keep_blank_values=True)
        headers = {k.lower(): v for k, v in http.headers.items()}
        length = int(headers.get("content-length") or 0)
        raw_body = http.rfile.read(length) if length else b""
        op, path_params, allowed = self.description.match(method, path)
        if op is None:
            problem = (f"{method} is not allowed on {path} (the description allows {', '.join(allowed)})" if allowed
                       else f"no operation of the description matches {method} {path}")
            self._record(RecordedExchange(method, path, None, raw_body[:2000], query, 404, [problem]))
            self._send(http, 404, {"error": problem})
            return
        problems, body = self.description.validate_request(op, path_params, query, headers, raw_body)
        if op.secured and not headers.get("authorization"):
            problems.append(f"{op} requires an Authorization header (bearer token); none was sent")
        if problems:
            self._record(RecordedExchange(method, path, op.operation_id, body, query, 400, problems))
            self._send(http, 400, {"error": "request does not match the API description", "problems": problems})
            return
        fault = self._take_fault(op)
        if fault is not None:
            if fault.status is not None or fault.raw is not None or fault.drop:
                self._answer_fault(http, op, method, path, query, body, fault)
                return
            if self._stopping.wait(fault.delay):  # a slow server: wait, then answer normally
                return
        request = StubRequest(method, path, op, path_params, query, headers, body)
        try:
            response = self.handler(request)
        except Exception as exc:  # a bug in the fake: answer 500 and record it
            log.exception("stub handler failed on %s", op)
            problem = f"stub handler raised {type(exc).__name__}: {exc}"
            self._record(RecordedExchange(method, path, op.operation_id, body, query, 500, [problem]))
            self._send(http, 500, {"error": problem})
            return
        answer_problems = self.description.validate_response(
            op, response.status, response.body, has_body=response.body is not None
        )
        self._record(RecordedExchange(method, path, op.operation_id, body, query, response.status, answer_problems))
        self._send(http, response.status, response.body, response.headers)

    def _answer_fault(self, http: BaseHTTPRequestHandler, op: Operation, method: str, path: str,
                      query: dict[str, list[str]], body: Any, fault: Fault) -> None:
        problems: list[str] = []
        status = fault.status if fault.status is not None else 200
        if fault.raw is None and not fault.drop and fault.conform:
            problems = self.description.validate_response(op, status, fault.body, has_body=fault.body is not None)
        self._record(RecordedExchange(method, path, op.operation_id, body, query, status, problems, fault=True))
        if fault.delay and self._stopping.wait(fault.delay):
            return
        if fault.drop:
            try:
                http.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            http.close_connection = True
            return
        if fault.raw is not None:
            self._send_bytes(http, status, fault.raw, {"Content-Type": "application/json", **fault.headers})
            return
        self._send(http, status, fault.body, fault.headers)

    def _send(self, http: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode("utf-8")
        extra = {"Content-Type": "application/json"} if body is not None else {}
        self._send_bytes(http, status, data, {**extra, **(headers or {})})

    @staticmethod
    def _send_bytes(http: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str]) -> None:
        try:
            http.send_response(status)
            for key, value in headers.items():
                http.send_header(key, value)
            http.send_header("Content-Length", str(len(data)))
            http.end_headers()
            if data:
                http.wfile.write(data)
            http.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            http.close_connection = True  # the client gave up (timed out) before the answer


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes (for background work in tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
