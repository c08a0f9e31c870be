"""Scan throughput of the memory scanner in MB/s, and its worst case on hostile input, next to a Hermes-style
regex list (the peer in ``security_eval.py``) measured in the same run.

    python benchmarks/security_speed.py

Targets: at least 5 MB/s on ordinary notes, under a second for any 1 MB input (including inputs that expand under
normalization: U+FDFA ligatures, long combining runs). CPU time of this process (the machine may be shared).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))

from security_eval import peer_blocked

from ironmem.core.security import scan

NOTES = [
    "User prefers metric units and short answers. Project Falcon ships on Friday; the repo is in ~/code/falcon.",
    "Meeting notes: discussed the Q3 budget, Jana will send the slides, follow up with the design team.",
    "The build uses Python 3.11 and pytest; run `pytest -q` before pushing. Docs: https://docs.python.org/3/",
    "Allergic to peanuts. Likes hiking near Annecy. Sister's birthday is 12 May; prefers tea over coffee.",
    "Café in Zürich on Tuesday; Москва trip in May; 東京 hotel booked; the invoice is €120.",
]
MB = 1_000_000


def cpu(f, *args) -> float:  # type: ignore[no-untyped-def]
    start = time.process_time()
    f(*args)
    return time.process_time() - start


def main() -> int:
    entry = " ".join(NOTES)
    entries = [entry[i:] + entry[:i] for i in range(0, 500, 10)]  # 50 distinct ~500-character notes
    n = 20
    t = cpu(lambda: [scan(e) for _ in range(n) for e in entries])
    size = n * sum(len(e.encode()) for e in entries)
    t_peer = cpu(lambda: [peer_blocked(e) for _ in range(n) for e in entries])
    big = "\n".join(NOTES * (MB // len(entry)))[:MB]
    hostile = {
        "ordinary notes": big,
        "U+FDFA ligatures": "\ufdfa" * MB,
        "combining run": "a" + "\u0301" * (MB - 1),
        "tag characters": "a" + "".join(chr(0xE0041 + i % 26) for i in range(MB - 1)),
        "zero-width": "\u200b" * MB,
        "emoji joiners": ("👨\u200d👩 " * MB)[:MB],
        "look-alike words": ("pаypаl " * MB)[:MB],
        "base64-ish": "QUJD" * (MB // 4),
        "rule words": ("ignore previous send http " * MB)[:MB],
        "token openers": "<|" * (MB // 2),
        "escape openers": ("&%=\\u+U+" * MB)[:MB],
    }
    print(f"notes of ~500 chars: {size / t / 1e6:.1f} MB/s (peer: {size / t_peer / 1e6:.1f} MB/s)   target >= 5")
    worst = 0.0
    print("1 MB inputs (CPU seconds, target < 1; peer in brackets):")
    for name, text in hostile.items():
        s, p = cpu(scan, text), cpu(peer_blocked, text)
        worst = max(worst, s)
        print(f"  {name:20} {s:6.2f} s  ({p:.2f} s)")
    ok = size / t / 1e6 >= 5 and worst < 1
    print("targets:", "MET" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
