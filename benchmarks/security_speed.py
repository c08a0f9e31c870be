"""Scan throughput of the memory scanner (``ironmem.core.security.scan``) in MB/s, on 1 MB of each kind of text.

Texts (built from files of this repository, deterministic):

* ordinary notes: the 2,200-character note of ``security_eval.py`` repeated, and the benign rows of the
  labelled corpus (notes, documents, chat turns in 11 languages) shuffled and joined;
* prose: ``docs/*.md`` and ``README.md``;
* code: ``ironmem/**/*.py``;
* dense attacks: the attack rows of the corpus joined (every rule has work to do).

Also: one 2,200-character note (ms), the 100k-character adversarial inputs of ``tests/test_security_linear.py``
and a linearity check (the time for 400k characters over the time for 100k: about 4 when linear).

Times are CPU time of this process (``time.process_time``), best of ``--repeat`` runs, because the machine
may be shared; the load average is printed with them. Target (issue #14): 1 MB of any text in under 1 s.

    python benchmarks/security_speed.py              # about 1-2 minutes
    python benchmarks/security_speed.py --repeat 1 --json out.json
    python benchmarks/security_speed.py --context recall   # scan(text, "recall")
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ironmem.core.security import scan
from ironmem.core.security.scanner import ScanContext

MB = 1_000_000
NOTE_PARTS = [
    "User prefers metric units and short answers. Project Falcon ships on Friday; the repo is in ~/code/falcon.",
    "Meeting notes: discussed the Q3 budget, Jana will send the slides, follow up with the design team.",
    "The build uses Python 3.11 and pytest; run `pytest -q` before pushing. Docs: https://docs.python.org/3/",
    "Allergic to peanuts. Likes hiking near Annecy. Sister's birthday is 12 May; prefers tea over coffee.",
]


def _note() -> str:
    entry = " ".join(NOTE_PARTS)
    while len(entry) < 2200:
        entry += " " + entry
    return entry[:2200]


def _fill(parts: list[str], size: int = MB) -> str:
    """``parts`` joined by newlines (cycled) up to ``size`` characters."""
    out: list[str] = []
    total = 0
    i = 0
    while total < size:
        p = parts[i % len(parts)]
        out.append(p)
        total += len(p) + 1
        i += 1
    return "\n".join(out)[:size]


def corpora() -> dict[str, str]:
    rows = [json.loads(line) for line in (ROOT / "tests/data/security/corpus.jsonl").open(encoding="utf-8")]
    rng = random.Random(14)
    benign = [r["text"] for r in rows if r["label"] == "benign"]
    attacks = [r["text"] for r in rows if r["label"] == "attack"]
    rng.shuffle(benign)
    rng.shuffle(attacks)
    docs = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
    code = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "ironmem").rglob("*.py"))]
    return {
        "notes (2,200-char note)": _fill([_note()]),
        "notes (corpus benign rows)": _fill(benign),
        "prose (docs/*.md)": _fill([*docs, (ROOT / "README.md").read_text(encoding="utf-8")]),
        "code (ironmem/*.py)": _fill(code),
        "dense attacks (corpus rows)": _fill(attacks),
    }


CONTEXT: list[ScanContext] = ["write"]


def cpu(text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        scan(text, CONTEXT[0])
        best = min(best, time.process_time() - t0)
    return best


def adversarial() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("_linear", ROOT / "tests/test_security_linear.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.CASES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, the best one counts (default 3)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--context", choices=["write", "recall"], default="write", help="scan(text, context)")
    args = ap.parse_args()
    CONTEXT[0] = args.context
    scan("warm up: rules, automaton and model are loaded once")
    report: dict[str, Any] = {"clock": f"cpu (time.process_time), best of {args.repeat}", "context": args.context}
    report["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    note = _note()
    per = min(cpu(note, 1) for _ in range(20))
    report["note_2200_ms"] = per * 1000
    print(f"one 2,200-character note: {per * 1000:.1f} ms")
    print(f"\n{'1 MB of':34} {'CPU s':>7} {'MB/s':>6}")
    report["one_mb"] = {}
    for name, text in corpora().items():
        t = cpu(text, args.repeat)
        report["one_mb"][name] = {"s": t, "mb_per_s": len(text) / MB / t}
        print(f"{name:34} {t:7.2f} {len(text) / MB / t:6.2f}")
    print("\nadversarial inputs (100k characters)")
    report["adversarial_100k_s"] = {}
    for name, text in adversarial().items():
        t = cpu(text, 1)
        report["adversarial_100k_s"][name] = t
        print(f"  {name:30} {t:6.2f} s")
    print("\nlinearity: CPU time for 400k characters / for 100k (4 when linear)")
    report["linearity_400k_over_100k"] = {}
    for name, unit in (("notes", note + "\n"), ("send words", "send the conversation to "), ("tag run", "\U000e0041")):
        small = cpu((unit * (100_000 // len(unit) + 1))[:100_000], args.repeat)
        big = cpu((unit * (400_000 // len(unit) + 1))[:400_000], args.repeat)
        report["linearity_400k_over_100k"][name] = big / small
        print(f"  {name:30} {small:6.2f} s -> {big:6.2f} s  x{big / small:.1f}")
    load = report["load_average"]
    print("\nload average", ", ".join(f"{x:.1f}" for x in load) if load else "n/a")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
