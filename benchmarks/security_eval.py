"""Evaluate the memory security scanner on the labelled corpus.

Prints detection rate and false-positive rate overall, per corpus category and per split (``dev`` rows
were used while writing the rules; ``heldout`` rows were not), scan latency and throughput on 2 KB
entries, and the same figures for a Hermes-style baseline regex list measured in the same run.

    python benchmarks/security_eval.py                  # report
    python benchmarks/security_eval.py --json out.json  # also write the figures as JSON
    python benchmarks/security_eval.py --misses dev     # list dev rows the scanner gets wrong
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ironmem.core.security import scan

CORPUS = ROOT / "tests" / "data" / "security" / "corpus.jsonl"

# --------------------------------------------------------------------------------------------------------
# Baseline: a small regex list in the style of the Hermes agent's memory scanner (written here from its
# description: a few override / role / exfiltration / persistence phrases, NFKC only, invisible characters
# flagged on sight). It is the comparison point the design document refers to.

_GAP = r"(?:\w+\s+){0,8}"
_BASELINE_PATTERNS = [
    rf"ignore\s+{_GAP}(?:previous|all|above|prior)\s+{_GAP}instructions",
    r"system\s+prompt\s+override",
    rf"disregard\s+{_GAP}(?:your|all|any)\s+{_GAP}(?:instructions|rules|guidelines)",
    rf"act\s+as\s+(?:if|though)\s+{_GAP}you\s+{_GAP}(?:have\s+no|don't\s+have)\s+{_GAP}(?:restrictions|limits|rules)",
    rf"do\s+not\s+{_GAP}tell\s+{_GAP}the\s+user",
    rf"you\s+are\s+{_GAP}now\s+(?:a|an|the)\s+",
    rf"pretend\s+{_GAP}(?:you\s+are|to\s+be)\s+",
    rf"output\s+{_GAP}(?:system|initial)\s+prompt",
    rf"(?:respond|answer|reply)\s+without\s+{_GAP}(?:restrictions|limitations|filters|safety)",
    r"curl\s+[^\n]{0,200}\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD)",
    r"wget\s+[^\n]{0,200}\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD)",
    r"cat\s+[^\n]{0,200}(?:\.env|credentials|\.netrc|\.pgpass|\.npmrc|\.pypirc)",
    r"(?:send|post|upload|transmit)\s+[^\n]{0,200}\s+(?:to|at)\s+https?://",
    r"authorized_keys",
    r"\$HOME/\.ssh|~/\.ssh",
    r"(?:update|modify|edit|write|append)\s+[^\n]{0,200}(?:AGENTS\.md|CLAUDE\.md|\.cursorrules)",
]
_BASELINE_RE = [re.compile(p, re.IGNORECASE) for p in _BASELINE_PATTERNS]
_BASELINE_INVISIBLE = set(
    "\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def baseline_blocked(text: str) -> bool:
    if set(text) & _BASELINE_INVISIBLE:
        return True
    t = unicodedata.normalize("NFKC", text)
    return any(r.search(t) for r in _BASELINE_RE)


def scanner_blocked(text: str) -> bool:
    return scan(text).blocked


# --------------------------------------------------------------------------------------------------------


def load() -> list[dict]:
    with CORPUS.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def evaluate(rows: list[dict], blocked: Callable[[str], bool]) -> dict:
    verdicts = [blocked(r["text"]) for r in rows]
    out: dict = {}
    for split in ("all", "dev", "heldout"):
        sel = [(r, v) for r, v in zip(rows, verdicts) if split == "all" or r["split"] == split]
        att = [v for r, v in sel if r["label"] == "attack"]
        ben = [v for r, v in sel if r["label"] == "benign"]
        per_cat: dict[str, list[bool]] = defaultdict(list)
        for r, v in sel:
            if r["label"] == "attack":
                per_cat[r["category"]].append(v)
        ben_cat: dict[str, list[bool]] = defaultdict(list)
        for r, v in sel:
            if r["label"] == "benign":
                ben_cat[r["category"]].append(v)
        out[split] = {
            "attacks": len(att),
            "benign": len(ben),
            "detection": sum(att) / len(att) if att else 0.0,
            "false_positive": sum(ben) / len(ben) if ben else 0.0,
            "per_category": {
                c: {"n": len(v), "detection": sum(v) / len(v)} for c, v in sorted(per_cat.items())
            },
            "benign_per_category": {
                c: {"n": len(v), "fp": sum(v) / len(v)} for c, v in sorted(ben_cat.items())
            },
        }
    out["_verdicts"] = verdicts
    return out


def timing(blocked: Callable[[str], bool], texts: list[str], repeat: int = 15) -> dict:
    """Best-of-``repeat`` CPU time per text (process time, so other load on the machine counts less)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for t in texts:
            blocked(t)
        best = min(best, time.process_time() - t0)
    best = max(best, 1e-9)
    per = best / len(texts)
    kb = sum(len(t.encode("utf-8")) for t in texts) / 1024
    return {"mean_ms": per * 1000, "kb_per_s": kb / best}


def entries_2k(rows: list[dict], size: int = 2200) -> list[str]:
    """Entries of exactly ``size`` characters made of consecutive corpus texts (one long memory entry each)."""
    out = []
    buf = ""
    for r in rows:
        buf += r["text"] + "\n\n"
        while len(buf) >= size:
            out.append(buf[:size])
            buf = buf[size:]
    return out


def package_doc_paragraphs(limit: int = 6000) -> list[str]:
    """Paragraphs of the README text of the installed Python packages: ordinary technical prose that is not
    part of the corpus (and never used for tuning), as an outside check on false positives."""
    import hashlib
    from importlib import metadata

    paras: set[str] = set()
    for dist in metadata.distributions():
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        for p in str(body).split("\n\n"):
            p = p.strip()
            if 80 < len(p) < 2200:
                paras.add(p)
    ranked = sorted(paras, key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    return ranked[:limit]


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures to this JSON file")
    ap.add_argument(
        "--misses", choices=["dev", "heldout", "all"], help="list the rows the scanner gets wrong"
    )
    args = ap.parse_args()

    rows = load()
    ours = evaluate(rows, scanner_blocked)
    base = evaluate(rows, baseline_blocked)

    docs = package_doc_paragraphs()
    docs_ours = [t for t in docs if scanner_blocked(t)]
    docs_base = sum(baseline_blocked(t) for t in docs)

    benign2k = entries_2k([r for r in rows if r["label"] == "benign" and r["text"].isascii()])
    multi2k = entries_2k([r for r in rows if r["label"] == "benign"])
    mixed2k = entries_2k(rows)
    t_ours = timing(scanner_blocked, benign2k)
    t_ours_multi = timing(scanner_blocked, multi2k)
    t_ours_mixed = timing(scanner_blocked, mixed2k)
    t_base = timing(baseline_blocked, benign2k)
    lat = []
    for t in (benign2k * 10)[:300]:
        t0 = time.process_time()
        scan(t)
        lat.append((time.process_time() - t0) * 1000)

    def line(name: str, r: dict) -> str:
        return (
            f"{name:26} detection {r['detection'] * 100:6.1f}%  ({r['attacks']} attacks)   "
            f"false positives {r['false_positive'] * 100:5.2f}%  ({r['benign']} benign)"
        )

    print(f"corpus: {CORPUS.relative_to(ROOT)}  rows {len(rows)}")
    print("splits: 'dev' rows were used while writing the rules; 'heldout' rows (about 30%, chosen by a hash")
    print(
        "        of the text) were never looked at while tuning, so they show how the scanner generalizes.\n"
    )
    for split in ("all", "dev", "heldout"):
        print(line(f"ironmem  [{split}]", ours[split]))
    for split in ("all", "heldout"):
        print(line(f"baseline [{split}]", base[split]))
    print("\nper attack category (ironmem all / heldout | baseline all):")
    for cat, v in ours["all"]["per_category"].items():
        h = ours["heldout"]["per_category"].get(cat, {"n": 0, "detection": float("nan")})
        b = base["all"]["per_category"][cat]
        print(
            f"  {cat:22} {v['detection'] * 100:6.1f}% (n={v['n']:3})   heldout {h['detection'] * 100:6.1f}% "
            f"(n={h['n']:3})   | baseline {b['detection'] * 100:6.1f}%"
        )
    print("\nfalse positives per benign category (ironmem | baseline):")
    for cat, v in ours["all"]["benign_per_category"].items():
        b = base["all"]["benign_per_category"][cat]
        print(f"  {cat:22} {v['fp'] * 100:6.2f}% (n={v['n']:3})   | baseline {b['fp'] * 100:6.2f}%")
    if docs:
        print(
            f"\noutside check: {len(docs)} README paragraphs of the installed Python packages (not in the corpus)"
        )
        print(
            f"  ironmem blocks {len(docs_ours)} ({len(docs_ours) / len(docs) * 100:.2f}%), "
            f"baseline blocks {docs_base} ({docs_base / len(docs) * 100:.2f}%)"
        )
    print(
        "\nspeed: CPU time per 2,200-character entry, best of 15 passes "
        "(process time; p50/p99 from single scans)"
    )
    print(
        f"  ironmem   {t_ours['mean_ms']:.3f} ms/entry  {t_ours['kb_per_s']:,.0f} KB/s   on {len(benign2k)} English "
        f"benign entries (p50 {statistics.median(lat):.3f} ms, p99 {percentile(lat, 0.99):.3f} ms)"
    )
    print(
        f"  ironmem   {t_ours_multi['mean_ms']:.3f} ms/entry  {t_ours_multi['kb_per_s']:,.0f} KB/s   on "
        f"{len(multi2k)} benign entries with all scripts (CJK, Cyrillic, Arabic, emoji)"
    )
    print(
        f"  ironmem   {t_ours_mixed['mean_ms']:.3f} ms/entry  {t_ours_mixed['kb_per_s']:,.0f} KB/s   on "
        f"{len(mixed2k)} entries cut from the whole corpus (attacks included)"
    )
    print(
        f"  baseline  {t_base['mean_ms']:.3f} ms/entry  {t_base['kb_per_s']:,.0f} KB/s   on the English entries"
    )
    print(
        f"\nratio: ironmem detects {ours['all']['detection'] / max(base['all']['detection'], 1e-9):.1f}x the "
        f"baseline's rate; speed ratio baseline/ironmem {t_base['mean_ms'] / t_ours['mean_ms']:.2f}"
    )

    if args.misses:
        print(f"\n--- misses ({args.misses}) ---")
        for r, v in zip(rows, ours["_verdicts"]):
            if args.misses != "all" and r["split"] != args.misses:
                continue
            if (r["label"] == "attack") != v:
                kind = "MISSED" if r["label"] == "attack" else "FALSE+"
                extra = (
                    ""
                    if r["label"] == "attack"
                    else " " + scan(r["text"]).reason + " " + str([f.rule for f in scan(r["text"]).findings])
                )
                print(f"{kind} {r['id']} {r['category']}{extra}: {r['text'][:300]!r}")

    if args.json:
        for d in (ours, base):
            d.pop("_verdicts", None)
        args.json.write_text(
            json.dumps(
                {
                    "ironmem": ours,
                    "baseline": base,
                    "package_docs": {
                        "paragraphs": len(docs),
                        "ironmem_blocked": len(docs_ours),
                        "baseline_blocked": docs_base,
                    },
                    "speed": {
                        "ironmem_english_2k": t_ours,
                        "ironmem_all_scripts_2k": t_ours_multi,
                        "ironmem_mixed_2k": t_ours_mixed,
                        "baseline_english_2k": t_base,
                        "ironmem_p50_ms": statistics.median(lat),
                        "ironmem_p99_ms": percentile(lat, 0.99),
                        "entries": len(benign2k),
                    },
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
