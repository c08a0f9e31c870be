"""One embedding interface over the shapes users already have, with no framework import.

Accepted, checked in this order (duck typing):

- a LangChain ``Embeddings`` (``embed_documents(list[str])`` and ``embed_query(str)``),
- a LlamaIndex embedding (``get_text_embedding_batch(list[str])`` and ``get_query_embedding(str)``),
- a plain callable ``list[str] -> list[list[float]]`` (numpy arrays are fine).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["Embedder", "as_embedder", "describe_embedder"]


def _to_vector(value: Any, *, where: str) -> list[float]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"{where} returned {type(value).__name__} where a vector (list of floats) was expected")
    try:
        vector = [float(x) for x in value]
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{where} returned a vector with a non-number in it ({exc})") from exc
    if not vector:
        raise InvalidArgumentError(f"{where} returned an empty vector")
    if not all(math.isfinite(x) for x in vector):
        raise InvalidArgumentError(f"{where} returned a vector with NaN or infinite values")
    return vector


class Embedder:
    """Embeds documents and queries with whatever object it wraps; checks every vector it gets back.

    Example:
        >>> e = Embedder(lambda texts: [[float(len(t)), 1.0] for t in texts])
        >>> e.embed_query("abc")
        [3.0, 1.0]
    """

    def __init__(self, obj: Any) -> None:
        self.source = obj
        self.kind, self._docs, self._query = _resolve(obj)
        self.dims: int | None = None

    def _check(self, vectors: Any, count: int, where: str) -> list[list[float]]:
        if hasattr(vectors, "tolist"):
            vectors = vectors.tolist()
        if not isinstance(vectors, Sequence) or isinstance(vectors, (str, bytes)):
            raise ArgumentTypeError(f"{where} returned {type(vectors).__name__}; expected one vector per text")
        if len(vectors) != count:
            raise InvalidArgumentError(f"{where} returned {len(vectors)} vectors for {count} texts")
        out = [_to_vector(v, where=where) for v in vectors]
        for v in out:
            if self.dims is None:
                self.dims = len(v)
            elif len(v) != self.dims:
                raise InvalidArgumentError(f"{where} returned a {len(v)}-dimensional vector after {self.dims}-dimensional ones")
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._check(self._docs(list(texts)), len(texts), f"embedder {describe_embedder(self.source)}")

    def embed_query(self, text: str) -> list[float]:
        where = f"embedder {describe_embedder(self.source)}"
        return self._check([self._query(text)], 1, where)[0]

    def probe_dims(self) -> int:
        """The vector size, found by embedding a short text once."""
        if self.dims is None:
            self.embed_documents(["dimension probe"])
        assert self.dims is not None
        return self.dims


def _resolve(obj: Any) -> tuple[str, Callable[[list[str]], Any], Callable[[str], Any]]:
    if obj is None:
        raise ArgumentTypeError(
            "no embedder given: pass a LangChain Embeddings, a LlamaIndex embedding, or a callable "
            "list[str] -> list[list[float]]"
        )
    if callable(getattr(obj, "embed_documents", None)) and callable(getattr(obj, "embed_query", None)):
        return "langchain", obj.embed_documents, obj.embed_query
    if callable(getattr(obj, "get_text_embedding_batch", None)) and callable(getattr(obj, "get_query_embedding", None)):
        return "llama_index", obj.get_text_embedding_batch, obj.get_query_embedding
    if callable(obj) and not isinstance(obj, type):
        return "callable", obj, lambda text: obj([text])[0]
    raise ArgumentTypeError(
        f"{describe_embedder(obj)} is not an embedder: pass a LangChain Embeddings (embed_documents/embed_query), "
        "a LlamaIndex embedding (get_text_embedding_batch/get_query_embedding), or a callable "
        "list[str] -> list[list[float]]"
    )


def as_embedder(obj: Any) -> Embedder:
    """Wrap ``obj`` (see the module docstring); an :class:`Embedder` is returned as is."""
    return obj if isinstance(obj, Embedder) else Embedder(obj)


def describe_embedder(obj: Any) -> str:
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}"
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return f"{module}.{name}"
