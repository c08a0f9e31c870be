"""What the hosted-service providers (Honcho, Supermemory) share: one place that calls the service, says plainly
what went wrong and backs off when rate limited.

- Every call goes through :meth:`HostedService.call`. A failure becomes an
  :class:`~ironmem.core.errors.ExternalServiceError` whose message names the service, the HTTP status and what
  to do ("check HONCHO_API_KEY"). Hooks let it propagate: the manager's guard records it, the turn goes on, and
  ``status`` shows the reason.
- HTTP 429: the service is not called again before its ``Retry-After`` has passed (capped by ``max_backoff``);
  calls fail fast in the meantime instead of piling up behind a sleeping SDK retry.
- Writes (turns, mirrored notes) go through the provider's :class:`~ironmem.providers._outbox.Outbox`, as for
  every shipped provider: ordered, saved under the memory home while the service does not take them, and sent
  again as soon as a call succeeds (``on_answer``).
- :meth:`HostedService.snapshot` is the service half of the provider's ``status_info()``.
- :class:`HostedProvider` is what the two providers do alike around their SDK: settings from keyword options or
  a Hermes JSON file with the key from the environment, ``status_info()``, tool calls whose failures become
  results, and a shutdown that saves what could not be sent.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel

from ..core.errors import ConfigError, ExternalServiceError
from ..core.provider import ToolSchema
from ._base import ProviderBase
from ._outbox import DEFAULT_MAX_PENDING
from ._tools import err, run_tool

__all__ = ["Failure", "HostedProvider", "HostedService", "clip_text", "is_local_url", "mask_secret",
           "merge_hermes_file", "read_json_config"]

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", bound=BaseModel)

#: What a turn's recall may wait for when the service asked us to come back later (429 without Retry-After).
DEFAULT_RATE_LIMIT_PAUSE = 30.0


def mask_secret(value: str | None) -> str:
    """``"sk-...1234"`` -> ``"****1234"``; short or empty secrets show no characters at all."""
    if not value:
        return "(not set)"
    return "****" + value[-4:] if len(value) >= 12 else "****"


def is_local_url(url: str | None) -> bool:
    """True for ``localhost`` and loopback addresses (a self-hosted server that may need no key)."""
    if not url:
        return False
    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost",) or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def clip_text(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


@dataclass(frozen=True)
class Failure:
    """A classified failure: ``kind``, the HTTP status if any, the wait the service asked for, a short detail."""

    kind: str
    status: int | None = None
    retry_after: float | None = None
    detail: str = ""


_ADVICE = {
    "auth": "the service refused the API key: check {key_env} (or the api_key setting)",
    "rate_limited": "rate limited by the service",
    "server": "the service had an internal error; it is retried later",
    "timeout": "no answer within {timeout:g}s (setting: timeout)",
    "connection": "could not connect to {url}: check base_url and the network",
    "malformed": "the service sent an answer that does not parse (not the documented format)",
    "client": "the service rejected the request",
    "error": "unexpected error",
}


class HostedService:
    """Calls into one hosted service with failure classification and 429 back-off; ``on_answer`` runs after each
    successful call (the provider's outbox replays what waits).

    ``classify`` turns an SDK exception into a :class:`Failure`. ``label`` names the service in messages.

    Example:
        >>> service = HostedService("Demo", key_env="DEMO_API_KEY", url="https://demo.invalid",
        ...                         classify=lambda exc: Failure("auth", 401))
        >>> def refused(): raise RuntimeError("401")
        >>> try:
        ...     service.call("search", refused)
        ... except Exception as exc:
        ...     print(exc)
        Demo search failed (HTTP 401): the service refused the API key: check DEMO_API_KEY (or the api_key setting)
        >>> service.snapshot()["state"]
        'failing'
    """

    def __init__(self, label: str, *, key_env: str, url: str, classify: Callable[[BaseException], Failure],
                 timeout: float = 5.0, max_backoff: float = 300.0, on_answer: Callable[[], Any] | None = None) -> None:
        self.label = label
        self.key_env = key_env
        self.url = url
        self.timeout = timeout
        self.max_backoff = max_backoff
        self.on_answer = on_answer
        self._classify = classify
        self._lock = threading.RLock()
        self.requests = 0
        self.failures = 0
        self.last_ok_at: float | None = None
        self.last_failure_at: float | None = None
        self.last_error: str = ""
        self.last_kind: str = ""
        self._blocked_until = 0.0  # time.monotonic() before which the service is not called (429)
        self._blocked_wall = 0.0

    # -- calls -----------------------------------------------------------------------------------
    def _message(self, op: str, failure: Failure) -> str:
        advice = _ADVICE.get(failure.kind, _ADVICE["error"]).format(
            key_env=self.key_env, timeout=self.timeout, url=self.url
        )
        status = f" (HTTP {failure.status})" if failure.status else ""
        text = f"{self.label} {op} failed{status}: {advice}"
        if failure.kind == "rate_limited":
            wait = failure.retry_after
            text += f"; retry after {wait:g}s" if wait is not None else ""
        if failure.detail and failure.kind in ("client", "error", "malformed", "server"):
            text += f" ({clip_text(failure.detail, 160)})"
        return text

    def blocked_for(self) -> float:
        """Seconds left before a rate-limited service is called again (0 when not blocked)."""
        return max(0.0, self._blocked_until - time.monotonic())

    def call(self, op: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` (one SDK call); raise :class:`ExternalServiceError` saying what went wrong."""
        wait = self.blocked_for()
        if wait > 0:
            raise ExternalServiceError(
                f"{self.label} {op} skipped: the service is rate limited (HTTP 429) for another {wait:.0f}s",
                kind="rate_limited", status=429, retry_after=wait,
            )
        with self._lock:
            self.requests += 1
        try:
            result = fn()
        except ExternalServiceError:
            raise
        except Exception as exc:
            failure = self._classify(exc)
            message = self._message(op, failure)
            with self._lock:
                self.failures += 1
                self.last_failure_at = time.time()
                self.last_error = message
                self.last_kind = failure.kind
                if failure.kind == "rate_limited":
                    pause = failure.retry_after if failure.retry_after is not None else DEFAULT_RATE_LIMIT_PAUSE
                    pause = min(max(pause, 0.0), self.max_backoff)
                    self._blocked_until = time.monotonic() + pause
                    self._blocked_wall = time.time() + pause
            log.warning("%s", message)
            raise ExternalServiceError(message, kind=failure.kind, status=failure.status,
                                       retry_after=failure.retry_after) from exc
        with self._lock:
            self.last_ok_at = time.time()
            self.last_error, self.last_kind = "", ""
        if self.on_answer is not None:
            self.on_answer()
        return result

    # -- status ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The service's state as last seen by this process (no network)."""
        with self._lock:
            if self.blocked_for() > 0:
                state = "rate_limited"
            elif self.last_error:
                state = "failing"
            elif self.last_ok_at is not None:
                state = "ok"
            else:
                state = "not contacted yet"
            out: dict[str, Any] = {"state": state, "url": self.url, "requests": self.requests}
            if self.failures:
                out["failures"] = self.failures
            if self.last_error:
                out["last_error"] = self.last_error
            if self.last_ok_at is not None:
                out["last_ok"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_ok_at))
            if state == "rate_limited":
                out["retry_after_s"] = round(self.blocked_for(), 1)
            return out


def json_detail(body: Any) -> str:
    """A short text of an error body (dict, str, bytes) for messages."""
    if body is None:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, dict):
        for key in ("error", "detail", "message"):
            if body.get(key):
                value = body[key]
                return value if isinstance(value, str) else json.dumps(value)[:200]
        return json.dumps(body)[:200]
    return str(body)[:200]


def known_tools(value: list[str], tools: dict[str, ToolSchema], label: str) -> list[str]:
    """A ``tools`` setting's validator: the names, each once, or a ValueError listing the unknown ones."""
    unknown = [t for t in value if t not in tools]
    if unknown:
        raise ValueError(f"unknown {label} tool(s) {unknown}; choose from {list(tools)}")
    return list(dict.fromkeys(value))


def read_json_config(path: str | Path, *, section: str) -> dict[str, Any]:
    """Read a Hermes-style JSON config file (``honcho.json``, ``supermemory.json``); ConfigError says what is wrong."""
    file = Path(os.path.expandvars(str(path))).expanduser()
    if not file.is_file():
        raise ConfigError(f"{section}.config_file: {file} does not exist; fix the path or remove config_file")
    try:
        data = json.loads(file.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{section}.config_file: {file} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{section}.config_file: cannot read {file}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{section}.config_file: {file} must hold a JSON object, got {type(data).__name__}")
    return data


def merge_hermes_file(data: Any, *, section: str, known: dict[str, str], host_key: str | None = None,
                      renames: dict[str, Callable[[Any], Any]] | None = None) -> Any:
    """Fill a settings dict from the Hermes JSON file named by its ``config_file`` key.

    ``known`` maps the file's keys (camelCase or snake_case) to setting names. Values already in ``data`` win
    (they come from config.yaml or environment variables). For ``honcho.json``, ``hosts.<host_key>`` overrides the
    file's root, as in Hermes. Keys ironmem does not use are listed in ``ignored_keys`` (shown by ``status``).
    """
    if not isinstance(data, dict):
        return data
    # The section may use the file's spelling (apiKey) or the setting's (api_key); settle on the setting's.
    data = {(known.get(k, k) if isinstance(k, str) else k): v for k, v in data.items()}
    if not data.get("config_file"):
        return data
    raw = read_json_config(data["config_file"], section=section)
    merged = {k: v for k, v in raw.items() if k != "hosts"}
    if host_key is not None:
        host = data.get("host") or host_key
        hosts = raw.get("hosts") or {}
        block = hosts.get(host) if isinstance(hosts, dict) else None
        if isinstance(block, dict):
            merged.update(block)
    ignored: list[str] = []
    values: dict[str, Any] = {}
    for key, value in merged.items():
        name = known.get(key)
        if name is None:
            ignored.append(key)
            continue
        if value is None:
            continue
        convert = (renames or {}).get(name)
        values[name] = convert(value) if convert else value
    out = {**values, **{k: v for k, v in data.items() if v is not None}}
    out["ignored_keys"] = sorted(set(ignored) | set(data.get("ignored_keys") or []))
    return out


class HostedProvider(ProviderBase, Generic[S]):
    """The part of a hosted-service provider (Honcho, Supermemory) that does not depend on the service.

    A subclass sets ``name``, ``requires``, ``settings_model``, ``env_aliases`` and ``env_options``; its
    ``__init__`` calls this one first, then sets ``self.service`` (a :class:`HostedService` whose ``on_answer`` is
    ``self.outbox.replay_soon``) and ``self._current_user``; its ``initialize`` calls ``_attach_outbox``; it
    provides ``base_url``, ``tool_schemas``, ``_tool`` (one known tool's call), ``_replay`` (the send function of a
    queued write, a JSON record) and ``_config_info`` (its part of ``status_info``).
    """

    #: Settings that keyword construction and ``from_hermes_config`` take from ``env_aliases``'s variables.
    env_options: ClassVar[tuple[str, ...]] = ()
    settings: S
    service: HostedService
    _current_user: str

    # -- settings -------------------------------------------------------------------------------
    @classmethod
    def _validated(cls, data: dict[str, Any]) -> S:
        try:
            return cast(S, cls.settings_model(**data))  # type: ignore[attr-defined]
        except ValueError as exc:
            raise ConfigError(f"{cls.name}: {exc}") from exc

    def __init__(self, *, settings: S | None = None, **options: Any) -> None:
        """The settings (given, or built from keyword ``options`` and the environment) and the common state."""
        if settings is None:
            model: type[BaseModel] = self.settings_model  # type: ignore[attr-defined]
            for key in self.env_options:
                var, alias = self.env_aliases[key], model.model_fields[key].alias  # type: ignore[attr-defined]
                if options.get(key) is None and (alias is None or alias not in options) and os.environ.get(var):
                    options[key] = os.environ[var]
            settings = self._validated(options)
        elif options:
            raise TypeError("pass either settings=... or keyword options, not both")
        self.settings = settings
        self._lock = threading.RLock()
        self._client: Any = None
        self._http: Any = None
        self._users: dict[str, str] = {}
        self._open_outbox(self._send_write, max_pending=getattr(self.settings, "max_pending_writes", DEFAULT_MAX_PENDING))

    @classmethod
    def _from_file(cls, data: dict[str, Any]) -> Any:
        """A provider from a Hermes JSON file's settings (``data``), the ``env_options`` it lacks from the environment."""
        for key in cls.env_options:
            var = cls.env_aliases[key]  # type: ignore[attr-defined]
            if key not in data and os.environ.get(var):
                data[key] = os.environ[var]
        return cls(settings=cls._validated(data))

    @classmethod
    def from_config(cls, settings: S, *, home: Path) -> Any:
        """Build from the provider's config section (no request is sent until a session uses it)."""
        return cls(settings=settings)

    @property
    def base_url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- sessions -------------------------------------------------------------------------------
    def _send_write(self, record: dict[str, Any]) -> None:
        """The outbox's sender: one queued write, through :meth:`HostedService.call`."""
        self.service.call(str(record.get("op", "write")), self._replay(record))

    def _replay(self, record: dict[str, Any]) -> Callable[[], Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- tools ----------------------------------------------------------------------------------
    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        offered = [schema.name for schema in self.tool_schemas()]
        if name not in offered:
            return err(f"unknown tool {name!r}; {self.service.label} provides {', '.join(offered)}")
        return run_tool(name, args, lambda a: self._tool(name, a), log=logging.getLogger(type(self).__module__),
                        label=self.name)

    def tool_schemas(self) -> list[ToolSchema]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _tool(self, name: str, args: dict[str, Any]) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- status and shutdown --------------------------------------------------------------------
    def status_info(self) -> dict[str, Any]:
        """Configuration (the key masked) and the service's state as last seen; sends no request."""
        s: Any = self.settings
        config: dict[str, Any] = {
            "base_url": self.base_url,
            "api_key": mask_secret(s.api_key.get_secret_value() if s.api_key else None),
            **self._config_info(),
            "timeout_s": self.service.timeout,
        }
        if s.config_file:
            config["config_file"] = s.config_file
        if s.ignored_keys:
            config["ignored_keys"] = list(s.ignored_keys)
        return {"config": config, "service": self.service.snapshot(), **super().status_info()}

    def _config_info(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def shutdown(self) -> None:
        """Send what is queued; what cannot be sent is saved for the next process. Then close the HTTP client."""
        self.outbox.close()
        with self._lock:
            http, self._http, self._client = self._http, None, None
        if http is not None:
            http.close()
