"""``SnapshotMemoryBlock``: the frozen snapshot as a block of a stock LlamaIndex ``Memory``.

For users who keep their own ``Memory`` (with fact extraction, vector blocks, ...) and want ironmem's frozen
snapshot in it. The block renders the same text on every call of the session; ``Memory`` puts it in the
system message (``InsertMethod.SYSTEM``, its default). Recall and turn syncing are what :class:`IronMemory`
adds on top; this block only renders the snapshot.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import BaseMemoryBlock
from pydantic import Field, PrivateAttr

from ...core.errors import ArgumentTypeError, InvalidArgumentError
from ...core.manager import MemoryManager
from ...core.session import Session
from . import _registry

__all__ = ["SnapshotMemoryBlock"]


class SnapshotMemoryBlock(BaseMemoryBlock[str]):
    """Renders a session's frozen snapshot (MEMORY.md + USER.md + the external provider's static block).

    Example:
        >>> import tempfile
        >>> from llama_index.core.memory import Memory
        >>> from ironmem import MemoryManager
        >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s1")
        >>> block = SnapshotMemoryBlock(session=session)
        >>> memory = Memory.from_defaults(session_id="s1", memory_blocks=[block])
        >>> session.system_prompt_block() in memory.get()[0].content
        True
    """

    name: str = Field(default="ironmem_snapshot", description="The name of the memory block.")
    priority: int = Field(
        default=0, description="0: never truncated (the snapshot must stay byte-identical)."
    )
    accept_short_term_memory: bool = Field(
        default=False, description="The snapshot takes no flushed messages."
    )
    session_handle: str = Field(default="", description="Handle of the live session in this process.")
    session_id: str = Field(default="", description="The ironmem session id (to rebuild elsewhere).")
    user_id: str | None = Field(default=None)
    home: str | None = Field(default=None, description="The memory home folder (to rebuild elsewhere).")
    snapshot_state: dict[str, Any] | None = Field(
        default=None, description="The frozen snapshot (to rebuild)."
    )

    _session: Any = PrivateAttr(default=None)

    def __init__(self, session: Session | MemoryManager | Any = None, **data: Any) -> None:
        live: Session | None = None
        if session is not None:
            if isinstance(session, MemoryManager):
                live = session.start_session()
            elif isinstance(session, Session):
                live = session
            elif isinstance(getattr(session, "session", None), Session):  # an IronMemory
                live = session.session
            else:
                raise ArgumentTypeError(
                    "SnapshotMemoryBlock takes a Session, a MemoryManager or an IronMemory, "
                    f"got {type(session).__name__}"
                )
            handle = _registry.new_handle()
            _registry.register(handle, live)
            data.update(
                snapshot_state=live.snapshot.to_dict(),
                session_handle=handle,
                session_id=live.id,
                user_id=live.user_id,
                home=str(live.manager.home),
            )
        super().__init__(**data)

    def model_post_init(self, __context: Any) -> None:
        live = _registry.lookup(self.session_handle) if self.session_handle else None
        if live is None:
            if not self.home:
                raise InvalidArgumentError(
                    "SnapshotMemoryBlock needs a session: "
                    "SnapshotMemoryBlock(session=manager.start_session(...))"
                )
            live = MemoryManager(home=self.home).start_session(
                self.session_id or None, self.user_id, snapshot=self.snapshot_state
            )
            self.session_handle = self.session_handle or _registry.new_handle()
            _registry.register(self.session_handle, live)
            self.session_id = live.id
        self._session = live

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> SnapshotMemoryBlock:
        return self  # shares the live session, like IronMemory

    @property
    def session(self) -> Session:
        return self._session

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return self._session.system_prompt_block()

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """The snapshot is frozen: nothing to store."""

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        return content  # never cut: a changed snapshot would break the prefix cache
