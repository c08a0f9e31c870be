"""Train the scanner's linear classifier and write ``ironmem/core/security/model.npz``.

Reproducible: fixed data order, deterministic L-BFGS (scipy, a dev dependency); the runtime reads the weights
with numpy only. Trained on the ``dev`` rows of ``tests/data/security/corpus.jsonl``: the ``heldout`` rows are the
release evaluation set (``benchmarks/security_eval.py --release``), which nothing is fitted or tuned on.

    python tools/train_scanner.py              # train, write model.npz, print the suggested threshold
    python tools/train_scanner.py --check      # retrain and verify model.npz is what this script makes

The operating point is chosen by a fixed procedure, not on the evaluation: the lowest score that keeps the
out-of-fold false positives (each source scored by a model trained without it) within ``FP_BUDGET`` (0.5%). With
``--calibrate`` the bias is shifted so that this score reads as ``THRESHOLDS.write`` (``scanner.py``): the scanner's
thresholds then stay put whatever the model, and ``build(..., calibrate=True)`` called from
``benchmarks/security_eval.py`` would do the same inside each fold (the held-out source takes no part; 8 more fits per fold). The shipped model is not
calibrated: ``THRESHOLDS.write`` is the score the procedure gives it. ``--choose-c`` prints, for each strength of
``C_GRID``, that operating point and the out-of-fold detection there; :func:`choose_c` picks the best (ties to the
smaller C): regularization chosen by cross-validation over sources, not on the evaluation's own figure.

    python tools/train_scanner.py --choose-c   # cross-validate C over sources (32 fits, a few minutes)
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

from ironmem.core.security import THRESHOLDS
from ironmem.core.security.classifier import DIM, MIN_FEATURES, LinearClassifier, featurize, prepare
from ironmem.core.text import plain

CORPUS = ROOT / "tests" / "data" / "security" / "corpus.jsonl"
OUT = ROOT / "ironmem" / "core" / "security" / "model.npz"
#: ``--choose-c`` preferred 64 on the corpus of 2026-12-05 (out-of-fold detection 51.8% against 47.0% at 4); moving
#: to it goes with ``--calibrate`` and a fresh ``security_eval.py --write-report`` run (see the docstring)
C = 4.0
C_GRID = (1.0, 4.0, 16.0, 64.0)
FP_BUDGET = 0.005
#: Caught by the detectors; their rows would teach the model character noise.
STRUCTURAL = {"invisible_text", "unicode_tags", "homoglyph", "encoded_instructions"}


def source_of(row: dict[str, Any]) -> str:
    """The provenance group used for leave-one-source-out: the package, or the hand-written set."""
    src = row["source"]
    return src.split(":")[1].split("==")[0] if src.startswith("pypi:") else src.split(" ")[0]


def load_corpus(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def trainable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a model learns from: dev split, structural attacks left to the detectors."""
    return [r for r in rows if r["split"] == "dev" and not (r["label"] == "attack" and r["category"] in STRUCTURAL)]


def features(rows: list[dict[str, Any]]) -> list[np.ndarray]:
    return [featurize(prepare(plain(r["text"]))) for r in rows]


def fit(feats: list[np.ndarray], y: np.ndarray, C: float = C) -> tuple[np.ndarray, float]:
    """L2-regularized, class-balanced logistic regression fitted with L-BFGS."""
    from scipy.optimize import minimize
    from scipy.sparse import csr_matrix

    indptr = np.concatenate([[0], np.cumsum([len(f) for f in feats])])
    data = np.concatenate([np.full(len(f), 1.0 / np.sqrt(max(len(f), MIN_FEATURES))) for f in feats])
    X = csr_matrix((data, np.concatenate(feats), indptr), shape=(len(feats), DIM))
    cols = np.unique(X.indices)
    Xc = X[:, cols].tocsr()
    yy = y.astype(np.float64)
    sw = np.where(yy > 0, len(yy) / (2 * max(yy.sum(), 1.0)), len(yy) / (2 * max(len(yy) - yy.sum(), 1.0)))

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        p = 1.0 / (1.0 + np.exp(-(Xc @ w + b)))
        ll = -np.sum(sw * (yy * np.log(p + 1e-12) + (1 - yy) * np.log(1 - p + 1e-12)))
        r = sw * (p - yy)
        g = np.concatenate([Xc.T @ r + w / C, [r.sum()]])
        return float(ll + 0.5 * np.dot(w, w) / C), g

    res = minimize(loss, np.zeros(len(cols) + 1), jac=True, method="L-BFGS-B", options={"maxiter": 150})
    w = np.zeros(DIM, dtype=np.float32)
    w[cols] = res.x[:-1]
    return w, float(res.x[-1])


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return float(np.log(p / (1 - p)))


def build(rows: list[dict[str, Any]], feats: list[np.ndarray] | None = None, c: float = C,
          calibrate: bool = False) -> LinearClassifier:
    """A classifier fitted on ``rows`` (already :func:`trainable`) with strength ``c``. ``calibrate``: shift the
    bias so that a score of ``THRESHOLDS.write`` is the operating point of ``rows`` (the lowest score keeping
    out-of-fold false positives within ``FP_BUDGET``, from one model per source trained without it)."""
    feats = features(rows) if feats is None else feats
    y = np.array([r["label"] == "attack" for r in rows], dtype=np.int8)
    w, b = fit(feats, y, c)
    shift = 0.0
    if calibrate:
        shift = _logit(THRESHOLDS.write) - _logit(operating_point(rows, out_of_fold(rows, feats, c))[0])
    return LinearClassifier(w.astype(np.float16).astype(np.float32), b + shift,
                            {"C": c, "rows": len(rows), "sources": sorted({source_of(r) for r in rows}),
                             **({"shift": round(shift, 6)} if calibrate else {})})


def out_of_fold(rows: list[dict[str, Any]], feats: list[np.ndarray], c: float) -> np.ndarray:
    """Each row's score by a model trained at strength ``c`` without the row's source."""
    scores = np.zeros(len(rows))
    for src in sorted({source_of(r) for r in rows}):
        train = [i for i, r in enumerate(rows) if source_of(r) != src]
        model = build([rows[i] for i in train], [feats[i] for i in train], c)
        for i, r in enumerate(rows):
            if source_of(r) == src:
                scores[i] = model._prob(feats[i])
    return scores


def operating_point(rows: list[dict[str, Any]], scores: np.ndarray, fp: float = FP_BUDGET) -> tuple[float, float]:
    """(the lowest score at which the benign rows' false positives stay within ``fp``, the attacks' detection
    there)."""
    attack = np.array([r["label"] == "attack" for r in rows])
    benign = np.sort(scores[~attack])[::-1]
    k = int(fp * len(benign))
    threshold = float(benign[k]) + 1e-9 if k < len(benign) else 0.0
    return threshold, float((scores[attack] >= threshold).mean()) if attack.any() else 0.0


def choose_c(rows: list[dict[str, Any]], feats: list[np.ndarray], show: bool = False) -> tuple[float, float]:
    """(C, suggested write threshold): the C of ``C_GRID`` with the best out-of-fold detection at ``FP_BUDGET``
    false positives (ties: the smaller C), and the score that keeps that budget."""
    best: tuple[float, float, float] | None = None
    for c in C_GRID:
        threshold, detection = operating_point(rows, out_of_fold(rows, feats, c))
        if show:
            print(f"C={c:<6} threshold {threshold:.3f}  out-of-fold detection {detection:.1%}", flush=True)
        if best is None or detection > best[0] + 1e-9:
            best = (detection, c, threshold)
    assert best is not None
    return best[1], best[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="verify the shipped model.npz is reproducible")
    ap.add_argument("--calibrate", action="store_true", help="shift the bias to the 0.5%% operating point")
    ap.add_argument("--choose-c", action="store_true", help="cross-validate C over sources (prints, writes nothing)")
    args = ap.parse_args()
    rows = trainable(load_corpus())
    feats = features(rows)
    if args.choose_c:
        c, threshold = choose_c(rows, feats, show=True)
        print(f"chosen C={c} (shipped {C}), its write threshold {threshold:.2f}")
        return
    model = build(rows, feats, calibrate=args.calibrate)
    w16 = model.weights.astype(np.float16)
    if args.check:
        with np.load(args.out) as data:
            same = np.array_equal(data["weights"], w16) and abs(float(data["bias"]) - model.bias) < 1e-9
        print("model.npz reproducible:", same)
        raise SystemExit(0 if same else 1)
    np.savez_compressed(args.out, weights=w16, bias=np.float64(model.bias),
                        meta=np.array(json.dumps(model.meta, sort_keys=True)))
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes), {len(rows)} rows")
    if args.calibrate:
        print(f"bias shifted by {model.meta['shift']:+.3f}: a score of {THRESHOLDS.write} is the lowest that keeps "
              f"out-of-fold false positives within {FP_BUDGET:.1%}")
    else:
        threshold = operating_point(rows, out_of_fold(rows, feats, C))[0]
        print(f"suggested write threshold ({FP_BUDGET:.1%} out-of-fold false positives): {threshold:.2f}")


if __name__ == "__main__":
    main()
