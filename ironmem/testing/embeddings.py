"""Offline embedders for tests and examples: a hashing bag-of-words, so similarity means shared words.

``DeterministicFakeEmbedding`` from langchain-core gives a random vector per exact text: two texts match only
when they are identical. These embedders give texts that share words a higher cosine similarity, which is
what a recall test needs, with no model download and no network.

- :class:`HashingEmbedder`: plain Python, no framework. Callable (``list[str] -> list[list[float]]``) and
  also offers ``embed_documents`` / ``embed_query``.
- :class:`HashingEmbeddings`: the same as a real LangChain ``Embeddings`` subclass (needs langchain-core).

Example:
    >>> e = HashingEmbedder(dims=64)
    >>> a, b, c = e(["I like green tea", "green tea please", "the train leaves at noon"])
    >>> cosine(a, b) > cosine(a, c)
    True
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

from ..core.errors import InvalidArgumentError

__all__ = ["HashingEmbedder", "HashingEmbeddings", "hashing_vector", "cosine"]  # noqa: F822 - built lazily

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be by did do does for from got has have i in is it its me my of on or our so that the their "
    "them they this to was we what when where which who why will with you your "
    # chat filler and the role labels ironmem puts in front of synced turns
    "user assistant noted nice remember thanks okay sure".split()
)
_SUFFIXES = ("ies", "ing", "ed", "es", "s")
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.25


def _stem(word: str) -> str:
    """Crude suffix folding: parked -> park, allergies -> allerg, teas -> tea."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def _features(text: str) -> list[tuple[str, float]]:
    """Stemmed words, plus their character trigrams at a lower weight (allergic ~ allergies)."""
    out: list[tuple[str, float]] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP or (len(word) < 3 and not word.isdigit()):
            continue
        stem = _stem(word)
        out.append((stem, _WORD_WEIGHT))
        padded = f"<{stem}>"
        out.extend(("#" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
    return out


def hashing_vector(text: str, dims: int = 256) -> list[float]:
    """A unit vector: each feature adds +-weight to a bucket chosen by a stable hash (blake2b, not hash())."""
    vec = [0.0] * dims
    features = _features(text)
    if not features:
        vec[0] = 1.0  # empty or stop-words only: a fixed direction instead of a zero vector
        return vec
    for feature, weight in features:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dims
        vec[bucket] += weight if digest[4] & 1 else -weight
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a)) or 1.0
    nb = math.sqrt(sum(y * y for y in b)) or 1.0
    return dot / (na * nb)


class HashingEmbedder:
    """Framework-free hashing bag-of-words embedder (see the module docstring).

    Example:
        >>> len(HashingEmbedder(dims=32).embed_query("hello"))
        32
    """

    def __init__(self, dims: int = 256) -> None:
        if dims < 8:
            raise InvalidArgumentError(f"dims must be at least 8, got {dims}")
        self.dims = dims
        self.calls = 0

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [hashing_vector(t, self.dims) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return hashing_vector(text, self.dims)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dims={self.dims})"


_LANGCHAIN_CLASS: Any = None


def _langchain_class() -> Any:
    """Build :class:`HashingEmbeddings` on first use, so importing this module never imports langchain-core."""
    global _LANGCHAIN_CLASS
    if _LANGCHAIN_CLASS is None:
        try:
            from langchain_core.embeddings import Embeddings
        except ImportError as exc:  # pragma: no cover - exercised only without langchain-core
            raise ImportError("HashingEmbeddings needs langchain-core: pip install 'ironmem[langchain]'") from exc

        class HashingEmbeddings(Embeddings):
            """:class:`HashingEmbedder` as a LangChain ``Embeddings`` (accepted by mem0's ``langchain`` embedder).

            Example:
                >>> from ironmem.testing.embeddings import HashingEmbeddings
                >>> len(HashingEmbeddings(dims=16).embed_documents(["a b", "c"]))
                2
            """

            def __init__(self, dims: int = 256) -> None:
                self.dims = dims

            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return [hashing_vector(t, self.dims) for t in texts]

            def embed_query(self, text: str) -> list[float]:
                return hashing_vector(text, self.dims)

            def __repr__(self) -> str:
                return f"HashingEmbeddings(dims={self.dims})"

        HashingEmbeddings.__module__ = __name__
        _LANGCHAIN_CLASS = HashingEmbeddings
    return _LANGCHAIN_CLASS


def __getattr__(name: str) -> Any:
    if name == "HashingEmbeddings":
        return _langchain_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
