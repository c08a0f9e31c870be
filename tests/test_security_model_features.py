"""The model's features are computed faster (32-bit keys, cached powers) but are the same vectors: compared
with the reference implementation of the trained model (kept here verbatim) on corpus rows and long texts."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from ironmem.core.security import model
from ironmem.core.security.normalize import normalize

CORPUS = Path(__file__).parent / "data" / "security" / "corpus.jsonl"


def _ref_hashes(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The feature hashing the shipped model.npz was trained with (before the speed work of issue #14)."""
    n = len(text)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    cps32 = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    cps = cps32.astype(np.uint64)
    pw = np.empty(n + 1, dtype=np.uint64)
    ipw = np.empty(n + 1, dtype=np.uint64)
    pw[0] = ipw[0] = 1
    np.cumprod(np.full(n, model._P, dtype=np.uint64), out=pw[1:])
    np.cumprod(np.full(n, model._P_INV, dtype=np.uint64), out=ipw[1:])
    with np.errstate(over="ignore"):
        pref = np.zeros(n + 1, dtype=np.uint64)
        cps += np.uint64(1)
        cps *= pw[:n]
        np.cumsum(cps, out=pref[1:])
    idx_parts: list[np.ndarray] = []
    pos_parts: list[np.ndarray] = []
    positions = np.arange(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        for k in model.CHAR_NS:
            if n < k:
                continue
            m = n - k + 1
            h = pref[k:] - pref[:m]
            h *= ipw[:m]
            idx_parts.append(model._mix(h, np.uint64(k)))
            pos_parts.append(positions[:m])
        wm = model._word_mask(cps32)
        edges = np.diff(np.concatenate(([0], wm.astype(np.int8), [0])))
        ws = np.flatnonzero(edges == 1)
        we = np.flatnonzero(edges == -1)
        if len(ws):
            wh = (pref[we] - pref[ws]) * ipw[ws]
            if len(ws) > 1:
                bh = wh[:-1] * model._P + wh[1:]
            idx_parts.append(model._mix(wh, model._SALT_WORD))
            pos_parts.append(ws.astype(np.int64))
            if len(ws) > 1:
                idx_parts.append(model._mix(bh, model._SALT_BIGRAM))
                pos_parts.append(ws[:-1].astype(np.int64))
    if not idx_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    idx = np.concatenate(idx_parts)
    idx &= np.uint64(model.DIM - 1)
    return idx.astype(np.int64), np.concatenate(pos_parts)


def _unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` (by a plain sort: numpy's hash-based unique is slow on millions of keys)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def _ref_windows(text: str) -> list[np.ndarray]:
    idx, pos = _ref_hashes(text)
    stride = model.STRIDE if len(text) <= model.LONG_TEXT else model.WINDOW
    w_last = pos // stride
    keys = [w_last * model.DIM + idx]
    if stride < model.WINDOW:
        for back in range(1, (model.WINDOW + stride - 1) // stride):
            w = w_last - back
            ok = (w >= 0) & (pos < w * stride + model.WINDOW)
            keys.append(w[ok] * model.DIM + idx[ok])
    uniq = _unique(np.concatenate(keys))
    win, b = uniq >> 18, uniq & (model.DIM - 1)
    cuts = np.searchsorted(win, np.arange(int(win[-1]) + 2))
    return [b[cuts[w] : cuts[w + 1]] for w in range(len(cuts) - 1)]


def _texts() -> list[str]:
    rows = [json.loads(line)["text"] for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(18)
    long = ["\n".join(rng.sample(rows, 400)), "\n".join(rng.sample(rows, 1200)) * 2]
    return ["", ".", "a", "ab", "日本語", *rows[::7], *long]


def test_features_are_the_reference_vectors() -> None:
    for t in _texts():
        p = model.prepare(normalize(t).skel)
        got = model.featurize(p)
        want = _unique(_ref_hashes(p)[0])
        assert got.dtype == np.int64 and np.array_equal(got, want), p[:80]
        if len(p) > model.WINDOW:
            gw, ww = model.featurize_windows(p), _ref_windows(p)
            assert len(gw) == len(ww) and all(a.dtype == np.int64 and np.array_equal(a, b) for a, b in zip(gw, ww))


def test_long_text_scores_like_the_reference() -> None:
    m = model.load_model()
    if m is None:
        return
    for t in _texts()[-2:]:
        p = model.prepare(normalize(t).skel)
        ref = max(m._prob(w) for w in _ref_windows(p))
        assert abs(m.score(normalize(t).skel) - ref) < 1e-9


def test_a_short_text_weighs_as_little_evidence() -> None:
    """Fewer n-grams than ``MIN_FEATURES`` are scored as if the missing ones weighed nothing: the logit of a short
    text is shrunk toward the model's prior by sqrt(n / MIN_FEATURES), a long text's is untouched."""
    m = model.load_model()
    assert m is not None
    for text, short in (("Have you tried everything?", True), (" ".join(f"note {i} about the garden" for i in range(60)), False)):
        feats = model.featurize(model.prepare(normalize(text).skel))
        assert (feats.size < model.MIN_FEATURES) is short
        raw = float(m.weights[feats].sum())
        expected = 1.0 / (1.0 + np.exp(-(raw / np.sqrt(max(feats.size, model.MIN_FEATURES)) + m.bias)))
        assert abs(m._prob(feats) - expected) < 1e-9
    # the windows of a long text follow the same rule as a text scored whole
    text = "Did you do all of this yourself? " + "x" * 40
    assert abs(m.window_scores(text, 10_000)[0] - m._prob(model.featurize(text))) < 1e-9


def test_short_everyday_questions_are_recalled() -> None:
    from ironmem.core.security import scan

    # both scored 0.92-0.94 by the model alone with plain L2 normalization (a few n-grams of "you" and "this")
    for text in ("Have you tried everything?", "Did you do all of this yourself?"):
        assert not scan(text, context="recall").blocked, scan(text, context="recall")
