"""Train the scanner's linear model and write ``ironmem/core/security/model.npz``.

Reproducible: fixed seed, deterministic solver, rows in corpus order. Needs scipy (L-BFGS;
a dev dependency); the runtime reads the weights with numpy only.

    python tools/train_scanner.py              # train on the whole corpus, write model.npz
    python tools/train_scanner.py --check      # retrain and verify model.npz is what this script makes

Thresholds are chosen by NESTED selection on out-of-fold scores grouped by source (an inner
leave-one-source-out over the training rows, so a threshold is never set on rows the model was fitted on, and
in the leave-one-source-out evaluation never on the source being scored):

* the pair (``threshold``: the model blocks on its own; ``support_threshold``: a weak rule plus the model
  blocks) is the one with the highest detection of the WHOLE scanner (detectors, rules and model, combined the
  way ``scan`` combines them; see ``scanner.rule_signals``) on the inner held-out sources, among the pairs whose
  false-positive rate there is at most ``FP_TARGET`` (the issue's 1%) and whose support threshold is at least
  ``SUPPORT_MIN`` (the model confirms a weak rule only when it leans to "attack"); ties go to the stricter pair.
* ``recall_threshold``: recall time (ordinary conversation), stricter of ``threshold`` and 0.9.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ironmem.core.security.model import DIM, MIN_FEATURES, featurize, model_from_arrays, prepare
from ironmem.core.security.normalize import normalize
from ironmem.core.security.scanner import rule_signals

CORPUS = ROOT / "tests" / "data" / "security" / "corpus.jsonl"
OUT = ROOT / "ironmem" / "core" / "security" / "model.npz"
SEED = 1405
C = 4.0
# Structural categories are caught by dedicated detectors (hidden characters, fence, encodings); their
# rows would teach the model character noise, so they are left out of its training set.
STRUCTURAL = {"invisible_text", "unicode_tags", "homoglyph", "encoded_instructions"}
FP_TARGET = 0.01  # whole-scanner false positives on the inner held-out sources
GRID = np.round(np.arange(0.30, 0.991, 0.01), 2)  # candidate thresholds
# The model confirms a weak rule only when it leans to "attack" (the class-balanced fit puts the boundary at 0.5): a
# support threshold below it would let a model that finds the text more likely benign than not confirm a phrase.
SUPPORT_MIN = 0.5


def source_of(row: dict[str, Any]) -> str:
    """The provenance group used for leave-one-source-out: the package, or the hand-written set."""
    src = row["source"]
    if src.startswith("pypi:"):
        return src.split(":")[1].split("==")[0]
    return src.split(" ")[0]


def load_corpus(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def features(rows: list[dict[str, Any]]) -> list[np.ndarray]:
    return [featurize(prepare(normalize(r["text"]).skel)) for r in rows]


def signals(rows: list[dict[str, Any]]) -> np.ndarray:
    """(blocked without the model, a weak signal the model can support) per row, write context."""
    return np.array([rule_signals(r["text"], "write") for r in rows], dtype=bool).reshape(len(rows), 2)


def _matrix(feats: list[np.ndarray]):
    from scipy.sparse import csr_matrix

    indptr = np.zeros(len(feats) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(f) for f in feats])
    indices = np.concatenate(feats) if feats else np.zeros(0, dtype=np.int64)
    data = np.concatenate([np.full(len(f), 1.0 / np.sqrt(max(len(f), MIN_FEATURES))) for f in feats]) if feats else np.zeros(0)
    return csr_matrix((data, indices, indptr), shape=(len(feats), DIM))


def fit(feats: list[np.ndarray], y: np.ndarray) -> tuple[np.ndarray, float]:
    """L2-regularized logistic regression, class-balanced, fitted with L-BFGS (deterministic)."""
    from scipy.optimize import minimize

    X = _matrix(feats)
    yy = y.astype(np.float64)
    n_pos, n_neg = max(yy.sum(), 1.0), max(len(yy) - yy.sum(), 1.0)
    sw = np.where(yy > 0, len(yy) / (2 * n_pos), len(yy) / (2 * n_neg))
    cols = np.unique(X.indices)  # optimize only the buckets that occur (the rest stay 0)
    Xc = X[:, cols].tocsr()

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        z = Xc @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        eps = 1e-12
        ll = -np.sum(sw * (yy * np.log(p + eps) + (1 - yy) * np.log(1 - p + eps)))
        r = sw * (p - yy)
        g = np.empty_like(theta)
        g[:-1] = Xc.T @ r + w / C
        g[-1] = r.sum()
        return float(ll + 0.5 * np.dot(w, w) / C), g

    theta0 = np.zeros(len(cols) + 1)
    res = minimize(loss, theta0, jac=True, method="L-BFGS-B", options={"maxiter": 150})
    w = np.zeros(DIM, dtype=np.float32)
    w[cols] = res.x[:-1]
    return w, float(res.x[-1])


def _prob(w: np.ndarray, b: float, f: np.ndarray) -> float:
    z = (float(w[f].sum()) / float(np.sqrt(max(f.size, MIN_FEATURES)))) + b
    return float(1.0 / (1.0 + np.exp(-z)))


def trainable(rows: list[dict[str, Any]]) -> list[int]:
    return [i for i, r in enumerate(rows) if not (r["label"] == "attack" and r["category"] in STRUCTURAL)]


def choose_thresholds(
    scores: np.ndarray, y: np.ndarray, sig: np.ndarray, fp_target: float = FP_TARGET
) -> tuple[float, float]:
    """(threshold, support_threshold): best whole-scanner detection at <= ``fp_target`` false positives.

    ``scores`` are out-of-fold model scores, ``sig`` the rows' rule signals (see :func:`signals`). A row is
    blocked when the rules block it, or it has a weak signal and its score reaches the support threshold (at
    least ``SUPPORT_MIN``), or its score reaches the threshold. Ties go to the higher (stricter) thresholds.
    """
    ben, att = y == 0, y == 1
    best: tuple[float, float, float] | None = None  # (detection, threshold, support)
    for t in GRID[::-1]:
        alone = scores >= t
        for st in GRID[(GRID <= t) & (GRID >= SUPPORT_MIN)][::-1]:
            blocked = sig[:, 0] | (sig[:, 1] & (scores >= st)) | alone
            fp = blocked[ben].mean() if ben.any() else 0.0
            if fp > fp_target:
                continue
            det = blocked[att].mean() if att.any() else 0.0
            if best is None or det > best[0] + 1e-12:
                best = (det, float(t), float(st))
    if best is None:  # the rules alone exceed the budget: the model adds nothing
        return float(GRID[-1]), float(GRID[-1])
    return best[1], best[2]


def _fit_cached(
    fits: dict[tuple[str, ...], tuple[np.ndarray, float]] | None, ids: list[str], feats: list[np.ndarray], y: np.ndarray
) -> tuple[np.ndarray, float]:
    """:func:`fit`, memoized on the ids of the rows it is fitted on (the fit is deterministic, so a cached
    fit is the same fit). The leave-one-source-out evaluation fits "every source but A and B" both in A's
    and in B's outer fold; the cache halves its work without changing a number."""
    if fits is None:
        return fit(feats, y)
    key = tuple(ids)
    if key not in fits:
        fits[key] = fit(feats, y)
    return fits[key]


def train(
    rows: list[dict[str, Any]],
    feats: list[np.ndarray],
    sig: np.ndarray | None = None,
    fits: dict[tuple[str, ...], tuple[np.ndarray, float]] | None = None,
) -> tuple[np.ndarray, float, dict[str, Any]]:
    """Fit on ``rows`` and pick thresholds by an inner leave-one-source-out (see the module docstring).

    ``fits``: an optional memo shared between calls (see :func:`_fit_cached`)."""
    sig = signals(rows) if sig is None else sig
    idx = trainable(rows)
    y = np.array([rows[i]["label"] == "attack" for i in idx], dtype=np.int8)
    groups = [source_of(rows[i]) for i in idx]
    oof = np.zeros(len(idx))
    scored = np.zeros(len(idx), dtype=bool)
    for g in sorted(set(groups)):
        tr = [k for k, gg in enumerate(groups) if gg != g]
        te = [k for k, gg in enumerate(groups) if gg == g]
        if len(set(y[tr])) < 2:
            continue
        w, b = _fit_cached(fits, [rows[idx[k]]["id"] for k in tr], [feats[idx[k]] for k in tr], y[tr])
        for k in te:
            oof[k] = _prob(w, b, feats[idx[k]])
            scored[k] = True
    thr, sup = choose_thresholds(oof[scored], y[scored], sig[idx][scored])
    w, b = fit([feats[i] for i in idx], y)
    meta = {
        "threshold": thr,
        "support_threshold": sup,
        "recall_threshold": max(thr, 0.9),
        "fp_target": FP_TARGET,
        "seed": SEED,
        "C": C,
        "rows": len(idx),
        "dim": DIM,
        "sources": sorted(set(groups)),
        "trained_on": "tests/data/security/corpus.jsonl",
    }
    return w, b, meta


def build_model(
    rows: list[dict[str, Any]],
    feats: list[np.ndarray] | None = None,
    sig: np.ndarray | None = None,
    fits: dict[tuple[str, ...], tuple[np.ndarray, float]] | None = None,
):
    feats = features(rows) if feats is None else feats
    w, b, meta = train(rows, feats, sig, fits)
    return model_from_arrays(w, b, meta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="verify the shipped model.npz is reproducible")
    args = ap.parse_args()
    rows = load_corpus()
    feats = features(rows)
    w, b, meta = train(rows, feats)
    w16 = w.astype(np.float16)
    if args.check:
        with np.load(args.out) as data:
            same = np.array_equal(data["weights"], w16) and abs(float(data["bias"]) - b) < 1e-9
        print("model.npz reproducible:", same)
        raise SystemExit(0 if same else 1)
    np.savez_compressed(args.out, weights=w16, bias=np.float64(b), meta=np.array(json.dumps(meta, sort_keys=True)))
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes); thresholds {json.dumps(meta)}")


if __name__ == "__main__":
    main()
