"""Mem0 as ironmem's external provider: the open-source ``Memory`` in-process, or the hosted ``MemoryClient``.

Install with ``pip install 'ironmem[mem0]'``.

Local mode (the default) runs mem0's ``Memory`` in this process with a Qdrant store on disk
(``<home>/mem0/qdrant``) and a history database (``<home>/mem0/history.db``). Nothing leaves the machine unless
the embedder or LLM you configure calls a service:

- ``infer=False`` (default): every text is stored as given; no LLM is ever called. mem0's constructor still
  builds an LLM client, so ironmem hands it an OpenAI client pointed at ``127.0.0.1:9`` with a placeholder key
  (building it makes no request) and then swaps in a stub that raises a clear error if anything ever asks it to
  generate. No ``OPENAI_API_KEY`` is needed.
- ``infer=True``: mem0's LLM extracts facts from each exchange; give ``llm`` (mem0's own LLM config).
- Telemetry is off: ``MEM0_TELEMETRY=False`` is set before mem0 is first imported (unless you set it), and
  ironmem switches mem0's module flag off as well (``telemetry=True`` leaves it alone). mem0 itself still writes
  ``~/.mem0/config.json`` (an anonymous id) when it is imported; set ``MEM0_DIR`` to put it elsewhere.
- If spaCy is installed without its ``en_core_web_sm`` model, mem0 tries to download the model on first search;
  install the model or uninstall spaCy on machines without a network (without spaCy, mem0 skips lemmatizing).

Hosted mode (``api_key`` given, or ``MEM0_API_KEY`` set in the config path) uses ``mem0.MemoryClient``; the
client checks the key against the Mem0 API when it is created.

Example:
    >>> import tempfile
    >>> from ironmem import MemoryManager
    >>> from ironmem.testing.embeddings import HashingEmbeddings
    >>> provider = Mem0Provider(embedder=HashingEmbeddings(dims=64), path=tempfile.mkdtemp())  # doctest: +SKIP
    >>> manager = MemoryManager(home=tempfile.mkdtemp(), external=provider.open())  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from ..core.embedding import Embedder, as_embedder
from ..core.errors import InvalidArgumentError, ProviderUnavailableError
from ..core.provider import ToolSchema
from ._base import ProviderBase
from ._tools import err as _err
from ._tools import ok as _ok
from ._tools import run_tool, search_result, search_schema

__all__ = ["Mem0Provider", "Mem0Settings"]

log = logging.getLogger("ironmem.providers.mem0")

DEFAULT_USER = "default"
COLLECTION = "ironmem"
#: Where the never-called LLM client points (discard port on loopback): nothing leaves the machine.
_UNUSED_LLM = {"api_key": "ironmem-infer-disabled", "openai_base_url": "http://127.0.0.1:9/v1", "model": "unused"}
_SOURCE_KEY = "ironmem_source"

SEARCH_TOOL = search_schema(
    "mem0_search",
    "Search long-term memory (Mem0) for facts about the user and past conversations.",
)
ADD_TOOL = ToolSchema(
    name="mem0_add",
    description="Save a fact to long-term memory (Mem0) so it can be recalled in later conversations.",
    parameters={
        "type": "object",
        "properties": {"content": {"type": "string", "description": "The fact to remember, one short sentence."}},
        "required": ["content"],
    },
)
FORGET_TOOL = ToolSchema(
    name="mem0_forget",
    description="Delete one memory from long-term memory (Mem0) by the id a mem0_search result gave.",
    parameters={
        "type": "object",
        "properties": {"memory_id": {"type": "string", "description": "The id of the memory to delete."}},
        "required": ["memory_id"],
    },
)



def _quiet_mem0(telemetry: bool) -> None:
    """Turn mem0's PostHog telemetry off (before and after import) unless asked to keep it."""
    if telemetry:
        return
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    import mem0.memory.main as mem0_main
    import mem0.memory.telemetry as mem0_telemetry

    mem0_telemetry.MEM0_TELEMETRY = False
    mem0_main.MEM0_TELEMETRY = False


def _results(response: Any) -> list[dict[str, Any]]:
    if isinstance(response, dict):
        response = response.get("results", response.get("memories", []))
    return [r for r in (response or []) if isinstance(r, dict)]


# --------------------------------------------------------------------------------------------------
# Adapters handed to mem0
# --------------------------------------------------------------------------------------------------
class _Mem0Embedding:
    """mem0 embedder interface over any ironmem :class:`Embedder` (callables, LlamaIndex objects, ...).

    Registered in mem0's ``EmbedderFactory`` under the name ``ironmem``.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self._embedder: Embedder = as_embedder(config.model)

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        if memory_action == "search":
            return self._embedder.embed_query(text)
        return self._embedder.embed_documents([text])[0]

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        if memory_action == "search":
            return [self._embedder.embed_query(t) for t in texts]
        return self._embedder.embed_documents(list(texts))


class _InferDisabledLLM:
    """Stands in for mem0's LLM when ``infer`` is off: any call is a bug, reported plainly."""

    config = None

    def generate_response(self, *args: Any, **kwargs: Any) -> str:
        raise ProviderUnavailableError(
            "mem0 tried to call an LLM, but this Mem0Provider runs with infer=False and no llm configured. "
            "Set infer=True and give llm=... (mem0's LLM config) to let mem0 extract facts."
        )


def _is_langchain_embeddings(obj: Any) -> bool:
    if importlib.util.find_spec("langchain_core") is None or importlib.util.find_spec("langchain") is None:
        return False
    from langchain_core.embeddings import Embeddings

    return isinstance(obj, Embeddings)


# --------------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------------
class _LocalBackend:
    hosted = False

    def __init__(self, memory: Any, *, threshold: float) -> None:
        self.memory = memory
        self.threshold = threshold

    def add(self, messages: list[dict[str, str]], *, user_id: str, agent_id: str | None, metadata: dict[str, Any],
            infer: bool) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"user_id": user_id, "metadata": metadata, "infer": infer}
        if agent_id:
            kwargs["agent_id"] = agent_id
        return _results(self.memory.add(messages, **kwargs))

    def search(self, query: str, *, user_id: str, agent_id: str | None, top_k: int) -> list[dict[str, Any]]:
        filters = {"user_id": user_id, **({"agent_id": agent_id} if agent_id else {})}
        return _results(self.memory.search(query, filters=filters, top_k=top_k, threshold=self.threshold))

    def get(self, memory_id: str) -> dict[str, Any] | None:
        return self.memory.get(memory_id)

    def get_all(self, *, user_id: str, agent_id: str | None) -> list[dict[str, Any]]:
        filters = {"user_id": user_id, **({"agent_id": agent_id} if agent_id else {})}
        return _results(self.memory.get_all(filters=filters, top_k=10_000))

    def delete(self, memory_id: str) -> None:
        self.memory.delete(memory_id)

    def close(self) -> None:
        clients: list[Any] = []
        for store in (getattr(self.memory, "vector_store", None), getattr(self.memory, "_entity_store", None)):
            client = getattr(store, "client", None)
            if client is not None and all(client is not c for c in clients):
                clients.append(client)
        for client in clients:
            try:
                client.close()
            except Exception as exc:  # pragma: no cover - best effort
                log.debug("closing a mem0 vector store client failed: %s", exc)
        self.memory.close()


def _close_quietly(backend: _LocalBackend) -> None:
    try:
        backend.close()
    except Exception as exc:  # at interpreter exit: nothing left to report to
        log.debug("closing mem0 at exit failed: %s", exc)


class _HostedBackend:
    """The hosted Mem0 platform through ``mem0.MemoryClient`` (needs the network; not exercised offline)."""

    hosted = True

    def __init__(self, client: Any, *, threshold: float) -> None:
        self.client = client
        self.threshold = threshold

    def add(self, messages: list[dict[str, str]], *, user_id: str, agent_id: str | None, metadata: dict[str, Any],
            infer: bool) -> list[dict[str, Any]]:
        filters = {"user_id": user_id, **({"agent_id": agent_id} if agent_id else {})}
        return _results(self.client.add(messages, filters=filters, metadata=metadata, infer=infer))

    def search(self, query: str, *, user_id: str, agent_id: str | None, top_k: int) -> list[dict[str, Any]]:
        filters = {"user_id": user_id, **({"agent_id": agent_id} if agent_id else {})}
        return _results(self.client.search(query, filters=filters, top_k=top_k, threshold=self.threshold))

    def get(self, memory_id: str) -> dict[str, Any] | None:
        return self.client.get(memory_id)

    def get_all(self, *, user_id: str, agent_id: str | None) -> list[dict[str, Any]]:
        filters = {"user_id": user_id, **({"agent_id": agent_id} if agent_id else {})}
        return _results(self.client.get_all(filters=filters))

    def delete(self, memory_id: str) -> None:
        self.client.delete(memory_id)

    def close(self) -> None:
        close = getattr(getattr(self.client, "client", None), "close", None)
        if callable(close):
            close()


# --------------------------------------------------------------------------------------------------
# Settings (config.yaml section "mem0")
# --------------------------------------------------------------------------------------------------
class Mem0Settings(BaseModel):
    """The ``mem0`` section of ``config.yaml``. ``api_key`` also comes from ``MEM0_API_KEY``."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "local", "hosted"] = Field(
        "auto", description="local = mem0 open source in-process; hosted = Mem0 platform; auto = hosted if api_key"
    )
    api_key: SecretStr | None = Field(None, description="Mem0 platform API key (hosted mode); or MEM0_API_KEY")
    host: str | None = Field(None, description="Mem0 platform URL (hosted mode)")
    path: str | None = Field(None, description="folder of the local store; default <home>/mem0")
    collection: str = Field(COLLECTION, min_length=1, description="vector store collection name (local mode)")
    embedder: str | dict[str, Any] | None = Field(
        None,
        description=(
            "local mode: an import path 'package.module:object' (LangChain Embeddings, LlamaIndex embedding, callable, "
            "or a class created with embedder_options), or mem0's own embedder config {provider: ..., config: {...}}"
        ),
    )
    embedder_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for an embedder class")
    embedding_dims: int | None = Field(None, gt=0, description="vector size (found by probing an embedder object)")
    vector_store: dict[str, Any] | None = Field(None, description="mem0 vector_store config; default local Qdrant")
    llm: dict[str, Any] | None = Field(None, description="mem0 llm config; needed only with infer: true")
    infer: bool = Field(False, description="let mem0's LLM extract facts (needs llm); false stores text as given")
    top_k: int = Field(5, ge=1, le=50, description="memories recalled per turn")
    threshold: float = Field(0.1, ge=0.0, le=1.0, description="minimum similarity for recall")
    sync_turns: bool = Field(True, description="store each finished exchange")
    mirror_builtin: bool = Field(True, description="mirror writes of the built-in memory tool")
    default_user_id: str = Field(DEFAULT_USER, min_length=1, description="user id when a session has none")
    agent_id: str | None = Field(None, description="also scope memories by this agent id")
    telemetry: bool = Field(False, description="leave mem0's anonymous telemetry on")

    @model_validator(mode="after")
    def _check(self) -> Mem0Settings:
        if self.mode == "hosted" and self.api_key is None:
            raise InvalidArgumentError(
                "mem0.api_key is required when mem0.mode is 'hosted': set MEM0_API_KEY (or IRONMEM_MEM0_API_KEY) "
                "or use mode: local"
            )
        if self.infer and self.llm is None and not self.hosted:
            raise InvalidArgumentError(
                "mem0.llm is required when mem0.infer is true in local mode (mem0's LLM config, e.g. "
                "{provider: ollama, config: {model: llama3.1}}); or set infer: false"
            )
        return self

    @property
    def hosted(self) -> bool:
        return self.mode == "hosted" or (self.mode == "auto" and self.api_key is not None)


# --------------------------------------------------------------------------------------------------
# Provider
# --------------------------------------------------------------------------------------------------
class Mem0Provider(ProviderBase):
    """Mem0 memory: ``mem0_search``, ``mem0_add``, ``mem0_forget``; recall = top-k search per user message.

    Args:
        embedder: local mode: a LangChain ``Embeddings`` (passed to mem0's ``langchain`` embedder), a LlamaIndex
            embedding or a callable ``list[str] -> list[list[float]]``, or mem0's embedder config dict. None means
            mem0's default (OpenAI; needs ``OPENAI_API_KEY``).
        path: folder of the local store (default ``<home>/mem0``).
        api_key / host: hosted mode (``mem0.MemoryClient``).
        infer: let mem0's LLM extract facts (give ``llm``); False stores each text as given, no LLM.
        memory: an existing ``mem0.Memory`` or ``mem0.MemoryClient`` to use instead of building one.

    The store is opened by :meth:`open` (``from_config`` calls it); otherwise at the first session, which then
    waits for mem0 to import (a few seconds the first time in a process).

    Example:
        >>> provider = Mem0Provider()          # cheap: nothing is imported or opened yet
        >>> [tool.name for tool in provider.tool_schemas()]
        ['mem0_search', 'mem0_add', 'mem0_forget']
    """

    name = "mem0"
    settings_model: ClassVar[type[BaseModel]] = Mem0Settings
    env_aliases: ClassVar[dict[str, str]] = {"api_key": "MEM0_API_KEY"}

    def __init__(
        self,
        *,
        embedder: Any = None,
        path: str | Path | None = None,
        mode: Literal["auto", "local", "hosted"] = "auto",
        api_key: str | None = None,
        host: str | None = None,
        collection: str = COLLECTION,
        embedding_dims: int | None = None,
        vector_store: dict[str, Any] | None = None,
        llm: dict[str, Any] | None = None,
        infer: bool = False,
        top_k: int = 5,
        threshold: float = 0.1,
        sync_turns: bool = True,
        mirror_builtin: bool = True,
        default_user_id: str = DEFAULT_USER,
        agent_id: str | None = None,
        telemetry: bool = False,
        memory: Any = None,
    ) -> None:
        if infer and llm is None and memory is None and not (mode == "hosted" or (mode == "auto" and api_key)):
            raise InvalidArgumentError("infer=True needs llm=... (mem0's LLM config) in local mode, or infer=False")
        if mode == "hosted" and not api_key and memory is None:
            raise InvalidArgumentError("mode='hosted' needs api_key=... (or MEM0_API_KEY through the config file)")
        self.embedder = embedder
        self.path = Path(path).expanduser() if path is not None else None
        self.mode = mode
        self._api_key = api_key
        self.host = host
        self.collection = collection
        self.embedding_dims = embedding_dims
        self.vector_store = vector_store
        self.llm = llm
        self.infer = infer
        self.top_k = top_k
        self.threshold = threshold
        self.sync_turns = sync_turns
        self.mirror_builtin = mirror_builtin
        self.default_user_id = default_user_id
        self.agent_id = agent_id
        self.telemetry = telemetry
        self._given = memory
        self._backend: _LocalBackend | _HostedBackend | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._lock = threading.RLock()
        self._users: dict[str, str] = {}
        self._open_outbox(self._send)
        self._current_user = default_user_id

    @property
    def hosted(self) -> bool:
        if self._given is not None:
            return type(self._given).__name__ in ("MemoryClient", "AsyncMemoryClient")
        return self.mode == "hosted" or (self.mode == "auto" and bool(self._api_key))

    # -- config ---------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, settings: Mem0Settings, *, home: Path) -> Mem0Provider:
        """Build from the ``mem0`` config section and open the store (so the first session is fast)."""
        from ..core.config import import_object
        from ..core.errors import ConfigError

        embedder: Any = settings.embedder
        if isinstance(embedder, str):
            obj = import_object(embedder, key="mem0.embedder")
            if isinstance(obj, type):
                try:
                    obj = obj(**settings.embedder_options)
                except Exception as exc:
                    raise ConfigError(f"mem0.embedder_options: creating {embedder} failed: {type(exc).__name__}: {exc}") from exc
            embedder = obj
        elif isinstance(embedder, dict) and not {"provider"} <= set(embedder):
            raise ConfigError("mem0.embedder: mem0's embedder config needs a 'provider' key, e.g. {provider: ollama, config: {...}}")
        path = Path(settings.path).expanduser() if settings.path else home / "mem0"
        if not path.is_absolute():
            path = home / path
        provider = cls(
            embedder=embedder,
            path=path,
            mode=settings.mode,
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
            host=settings.host,
            collection=settings.collection,
            embedding_dims=settings.embedding_dims,
            vector_store=settings.vector_store,
            llm=settings.llm,
            infer=settings.infer,
            top_k=settings.top_k,
            threshold=settings.threshold,
            sync_turns=settings.sync_turns,
            mirror_builtin=settings.mirror_builtin,
            default_user_id=settings.default_user_id,
            agent_id=settings.agent_id,
            telemetry=settings.telemetry,
        )
        reason = provider.unavailable_reason
        if reason:
            raise ConfigError(f"mem0: {reason}")
        try:
            provider.open()
        except Exception as exc:
            raise ConfigError(f"mem0: opening the store failed: {type(exc).__name__}: {exc}") from exc
        return provider

    # -- contract -------------------------------------------------------------------------------
    @property
    def unavailable_reason(self) -> str:
        """Why :meth:`is_available` is False ("" when it is True). Cheap: imports nothing."""
        if self._given is not None or self._backend is not None:
            return ""
        if importlib.util.find_spec("mem0") is None:
            return "mem0ai is not installed: pip install 'ironmem[mem0]'"
        if self.hosted:
            return ""
        if self.embedder is None and not os.environ.get("OPENAI_API_KEY"):
            return (
                "no embedder: mem0's default embedder is OpenAI and OPENAI_API_KEY is not set. Pass embedder=... "
                "(a LangChain/LlamaIndex embedding or a callable) or mem0's embedder config"
            )
        if isinstance(self.embedder, dict) and self.embedder.get("provider") == "langchain":
            if importlib.util.find_spec("langchain") is None:
                return "mem0's langchain embedder needs the langchain package: pip install 'ironmem[langchain]'"
        return ""

    def initialize(self, session_id: str, **ctx: Any) -> None:
        user = str(ctx.get("user_id") or self.default_user_id)
        with self._lock:
            self._users[session_id] = user
            self._current_user = user
            if self.path is None and ctx.get("home"):
                self.path = Path(ctx["home"]) / "mem0"
        self._attach_outbox(ctx)
        self._open()

    def tool_schemas(self) -> list[ToolSchema]:
        return [SEARCH_TOOL, ADD_TOOL, FORGET_TOOL]

    # -- backend --------------------------------------------------------------------------------
    def open(self, home: str | Path | None = None) -> Mem0Provider:
        """Create the mem0 ``Memory`` (or ``MemoryClient``) now, not at the first session. Returns self.

        Without ``path=...``, a local store goes to ``<home>/mem0``: ``home`` here, else ``$IRONMEM_HOME`` or
        ``~/.ironmem`` (the manager's default home).
        """
        if self.path is None and self._given is None and not self.hosted:
            from ..core.manager import default_home

            self.path = (Path(home).expanduser() if home is not None else default_home()) / "mem0"
        self._open()
        return self

    def _open(self) -> _LocalBackend | _HostedBackend:
        with self._lock:
            if self._backend is not None:
                return self._backend
            if self._given is not None:
                backend: _LocalBackend | _HostedBackend
                if self.hosted:
                    backend = _HostedBackend(self._given, threshold=self.threshold)
                else:
                    backend = _LocalBackend(self._given, threshold=self.threshold)
            elif self.hosted:
                _quiet_mem0(self.telemetry)
                from mem0 import MemoryClient

                backend = _HostedBackend(MemoryClient(api_key=self._api_key, host=self.host), threshold=self.threshold)
            else:
                backend = _LocalBackend(self._build_local(), threshold=self.threshold)
                # Close the embedded Qdrant client at interpreter exit even when nobody calls close(): left to
                # the garbage collector, it prints a traceback during shutdown.
                self._finalizer = weakref.finalize(self, _close_quietly, backend)
            self._backend = backend
            return backend

    def _build_local(self) -> Any:
        if self.path is None:
            raise ProviderUnavailableError("Mem0Provider has no store folder yet: pass path=... or start a session with a home")
        reason = self.unavailable_reason
        if reason:
            raise ProviderUnavailableError(reason)
        _quiet_mem0(self.telemetry)
        from mem0 import Memory
        from mem0.configs.base import MemoryConfig
        from mem0.embeddings.configs import EmbedderConfig
        from mem0.utils.factory import EmbedderFactory

        self.path.mkdir(parents=True, exist_ok=True)
        dims = self.embedding_dims
        embedder_config: Any
        if isinstance(self.embedder, dict):
            embedder_config = dict(self.embedder)
            inner = dict(embedder_config.get("config") or {})
            if dims is not None:
                inner.setdefault("embedding_dims", dims)
            dims = dims or inner.get("embedding_dims")
            embedder_config["config"] = inner
        elif self.embedder is not None:
            wrapped = as_embedder(self.embedder)
            dims = dims or wrapped.probe_dims()
            if _is_langchain_embeddings(self.embedder):
                embedder_config = {"provider": "langchain", "config": {"model": self.embedder, "embedding_dims": dims}}
            else:
                # mem0 validates embedder provider names against its own list; register ironmem's adapter and
                # pass an already-built config so that validation is not re-run on the new name.
                EmbedderFactory.provider_to_class.setdefault("ironmem", f"{__name__}._Mem0Embedding")
                embedder_config = EmbedderConfig.model_construct(
                    provider="ironmem", config={"model": wrapped, "embedding_dims": dims}
                )
        else:
            embedder_config = {"provider": "openai", "config": {}}
        if self.vector_store is not None:
            vector_store = dict(self.vector_store)
        else:
            store_config: dict[str, Any] = {"path": str(self.path / "qdrant"), "collection_name": self.collection,
                                            "on_disk": True}
            if dims:
                store_config["embedding_model_dims"] = dims
            vector_store = {"provider": "qdrant", "config": store_config}
        config = MemoryConfig(
            vector_store=vector_store,
            embedder=embedder_config,
            llm=self.llm or {"provider": "openai", "config": dict(_UNUSED_LLM)},
            history_db_path=str(self.path / "history.db"),
        )
        memory = Memory(config)
        if self.llm is None:
            memory.llm = _InferDisabledLLM()
        return memory

    def _user(self, session_id: str | None = None) -> str:
        if session_id is not None and session_id in self._users:
            return self._users[session_id]
        return self._current_user

    # -- operations -----------------------------------------------------------------------------
    def add(self, text: str, *, user_id: str | None = None, source: str = "tool", target: str | None = None,
            infer: bool | None = None) -> list[dict[str, Any]]:
        """Store ``text`` for a user; returns mem0's result items (``id``, ``memory``, ``event``)."""
        text = (text or "").strip()
        if not text:
            raise InvalidArgumentError("nothing to save: content is empty")
        metadata: dict[str, Any] = {_SOURCE_KEY: source}
        if target:
            metadata["target"] = target
        with self._lock:
            return self._open().add(
                [{"role": "user", "content": text}], user_id=user_id or self._current_user, agent_id=self.agent_id,
                metadata=metadata, infer=self.infer if infer is None else infer,
            )

    def search(self, query: str, *, user_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Top matches for ``query``: ``[{"id", "memory", "score"}]``."""
        query = (query or "").strip()
        if not query:
            return []
        with self._lock:
            hits = self._open().search(query, user_id=user_id or self._current_user, agent_id=self.agent_id,
                                       top_k=limit or self.top_k)
        self.outbox.replay_soon()  # the store answers: send what waits for it
        return [{"id": h.get("id"), "memory": h.get("memory", ""), "score": h.get("score")} for h in hits if h.get("memory")]

    def forget(self, memory_id: str, *, user_id: str | None = None) -> bool:
        """Delete one memory of the user; False if it does not exist or belongs to someone else."""
        user = user_id or self._current_user
        with self._lock:
            backend = self._open()
            try:
                found = backend.get(memory_id)
            except Exception:
                found = None
            if not found or (found.get("user_id") not in (None, user)):
                return False
            backend.delete(memory_id)
            return True

    # -- hooks ----------------------------------------------------------------------------------
    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        return [hit["memory"] for hit in self.search(query, user_id=self._user(session_id))]

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        if not self.sync_turns:
            return
        messages = [{"role": r, "content": c.strip()} for r, c in (("user", user), ("assistant", assistant)) if (c or "").strip()]
        if messages:
            self.outbox.write({"op": "turn", "user": self._user(session_id), "session": session_id,
                               "messages": messages})

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        if not self.mirror_builtin or not (content or "").strip() or action not in ("add", "replace", "remove"):
            return
        op = "remove" if action == "remove" else "add"
        self.outbox.write({"op": op, "user": self._current_user, "target": target, "content": content})

    def _send(self, record: dict[str, Any]) -> None:
        """Perform one queued write (the outbox's sender): a turn, a mirrored note, or a removed note."""
        op, user = record.get("op"), str(record["user"])
        if op == "turn":
            with self._lock:
                self._open().add(list(record["messages"]), user_id=user, agent_id=self.agent_id,
                                 metadata={_SOURCE_KEY: "turn", "session_id": record["session"]}, infer=self.infer)
        elif op == "add":
            self.add(str(record["content"]), user_id=user, source="builtin", target=record["target"], infer=False)
        elif op == "remove":
            content = str(record["content"]).strip()
            with self._lock:
                backend = self._open()
                for item in backend.get_all(user_id=user, agent_id=self.agent_id):
                    meta = item.get("metadata") or {}
                    if meta.get(_SOURCE_KEY) == "builtin" and meta.get("target") == record["target"] \
                            and content in (item.get("memory") or ""):
                        backend.delete(item["id"])
        else:
            log.error("mem0: skipped a queued write of unknown kind %r", op)

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        return run_tool(name, args, lambda a: self._tool(name, a), log=log, label="mem0")

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        if name == SEARCH_TOOL.name:
            return search_result(args, self.top_k, lambda q, n: self.search(q, limit=n))
        if name == ADD_TOOL.name:
            content = args.get("content")
            if not isinstance(content, str) or not content.strip():
                return _err("'content' is required: the fact to remember")
            items = self.add(content, source="tool")
            return _ok(results=[{"id": i.get("id"), "memory": i.get("memory"), "event": i.get("event")} for i in items])
        if name == FORGET_TOOL.name:
            memory_id = args.get("memory_id")
            if not isinstance(memory_id, str) or not memory_id.strip():
                return _err("'memory_id' is required: the id from a mem0_search result")
            if not self.forget(memory_id.strip()):
                return _err(f"no memory with id {memory_id!r} for this user; search first to find the id")
            return _ok(forgotten=memory_id)
        return _err(f"unknown tool {name!r}; mem0 provides mem0_search, mem0_add and mem0_forget")

    def shutdown(self) -> None:
        self.outbox.close()
        with self._lock:
            backend, self._backend = self._backend, None
            finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if backend is not None and self._given is None:
            backend.close()

    def __repr__(self) -> str:
        mode = "hosted" if self.hosted else "local"
        return f"<Mem0Provider mode={mode} path={str(self.path) if self.path else None!r}>"
