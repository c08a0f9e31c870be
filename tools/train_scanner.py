"""Train the scanner's linear model and write ``ironmem/core/security/model.npz``.

Reproducible: fixed seed, deterministic solver, rows in corpus order. Needs scipy (L-BFGS;
a dev dependency); the runtime reads the weights with numpy only.

    python tools/train_scanner.py              # train on the whole corpus, write model.npz
    python tools/train_scanner.py --check      # retrain and verify model.npz is what this script makes

Thresholds are chosen on OUT-OF-FOLD scores (grouped by source, so a threshold is never set on rows the
model was fitted on):

* ``threshold``: the model blocks on its own; at most ``--fp-alone`` of benign rows score above it.
* ``support_threshold``: a weak rule plus the model blocks; at most ``--fp-support`` of benign rows.
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

from ironmem.core.security.model import DIM, featurize, model_from_arrays, prepare
from ironmem.core.security.normalize import normalize

CORPUS = ROOT / "tests" / "data" / "security" / "corpus.jsonl"
OUT = ROOT / "ironmem" / "core" / "security" / "model.npz"
SEED = 1405
C = 4.0
# Structural categories are caught by dedicated detectors (hidden characters, fence, encodings); their
# rows would teach the model character noise, so they are left out of its training set.
STRUCTURAL = {"invisible_text", "unicode_tags", "homoglyph", "encoded_instructions"}


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


def _matrix(feats: list[np.ndarray]):
    from scipy.sparse import csr_matrix

    indptr = np.zeros(len(feats) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(f) for f in feats])
    indices = np.concatenate(feats) if feats else np.zeros(0, dtype=np.int64)
    data = np.concatenate([np.full(len(f), 1.0 / np.sqrt(max(len(f), 1))) for f in feats]) if feats else np.zeros(0)
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
    z = (float(w[f].sum()) / float(np.sqrt(max(f.size, 1)))) + b
    return float(1.0 / (1.0 + np.exp(-z)))


def trainable(rows: list[dict[str, Any]]) -> list[int]:
    return [i for i, r in enumerate(rows) if not (r["label"] == "attack" and r["category"] in STRUCTURAL)]


def train(
    rows: list[dict[str, Any]], feats: list[np.ndarray], fp_alone: float = 0.005, fp_support: float = 0.03
) -> tuple[np.ndarray, float, dict[str, Any]]:
    """Fit on ``rows`` and pick thresholds from out-of-fold scores grouped by source."""
    idx = trainable(rows)
    y = np.array([rows[i]["label"] == "attack" for i in idx], dtype=np.int8)
    groups = [source_of(rows[i]) for i in idx]
    oof = np.zeros(len(idx))
    for g in sorted(set(groups)):
        tr = [k for k, gg in enumerate(groups) if gg != g]
        te = [k for k, gg in enumerate(groups) if gg == g]
        if len(set(y[tr])) < 2:
            continue
        w, b = fit([feats[idx[k]] for k in tr], y[tr])
        for k in te:
            oof[k] = _prob(w, b, feats[idx[k]])
    benign = np.sort(oof[y == 0])

    def quantile_threshold(rate: float) -> float:
        if benign.size == 0:
            return 0.5
        k = int(np.floor(rate * benign.size))
        return float(min(0.99, max(0.3, benign[::-1][k] + 1e-6)))

    w, b = fit([feats[i] for i in idx], y)
    thr = quantile_threshold(fp_alone)
    meta = {
        "threshold": thr,
        "support_threshold": min(thr, quantile_threshold(fp_support)),
        "recall_threshold": max(thr, 0.9),
        "seed": SEED,
        "C": C,
        "rows": len(idx),
        "dim": DIM,
        "sources": sorted(set(groups)),
        "trained_on": "tests/data/security/corpus.jsonl",
    }
    return w, b, meta


def build_model(rows: list[dict[str, Any]], feats: list[np.ndarray] | None = None):
    feats = features(rows) if feats is None else feats
    w, b, meta = train(rows, feats)
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
