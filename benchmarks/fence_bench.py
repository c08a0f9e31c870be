"""Rule 2 benchmark: generated forgeries against the fence, and the fence's speed on 1 MB of hostile text.

    python benchmarks/fence_bench.py                 # 10,000 generated attacks + the 1 MB timings
    python benchmarks/fence_bench.py --quick         # 1,000 attacks
    python benchmarks/fence_bench.py --examples 50000 --json out.json

1. **Generated forgeries**: the grammar of ``tests/test_fence_properties.py`` (fence tags, chat-template tokens,
   turn and note headers; every letter a case / Unicode look-alike / escape variant, separators, nesting, RTL
   override) produces attacks; each is fenced and the oracle of that test module inspects the folded output.
   The same attacks go through a literal-tag peer (the fence as a list of known tags: ``re.sub`` of
   ``</?memory-context>`` and a fixed set of template tokens, case-insensitive), so the table shows what
   construction buys over listing variants.
2. **Throughput**: ``sanitize`` and ``fence`` on 1 MB of (a) dense attacks (a forgery every ~40 characters),
   (b) sparse attacks (one per ~2 KB of prose), and ordinary text: (c) plain English prose, (d) Markdown notes
   with links, paths, ``User:`` and ``Note:`` lines, (e) code with ``<div>``, ``<s>``, ``a < b``, (f) Cyrillic
   prose, (g) Cyrillic notes with brackets and colons; CPU time (best of 3 cold calls: the fence's memory of
   recent answers is cleared before each) and MB/s, against the same peer. Target: well under 1 s per MB.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _util import ROOT, metadata, table, write_json

sys.path.insert(0, str(ROOT / "tests"))

import test_fence_properties as grammar
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ironmem.core.fence import FENCE_CLOSE, FENCE_OPEN, SYSTEM_NOTE, _find_cached, fence, sanitize

_PEER_RE = re.compile(
    r"</?\s*memory[-_ ]?context\s*>|<\|(?:im_start|im_end|eot_id|start_header_id|end_header_id)\|>|\[/?INST\]"
    r"|<start_of_turn>|<end_of_turn>|\[System note:",
    re.IGNORECASE,
)


def peer_sanitize(text: str) -> str:
    """The fence as a list of known variants (what issue #13 replaced)."""
    return _PEER_RE.sub("[removed]", text)


def peer_fence(text: str) -> str:
    body = peer_sanitize(text).strip()
    return f"{FENCE_OPEN}\n{SYSTEM_NOTE}\n\n{body}\n{FENCE_CLOSE}" if body else ""


def run_grammar(examples: int, seed: int) -> dict[str, Any]:
    """Fence ``examples`` generated attacks; count what the oracle still finds, for ours and the peer."""
    counts = {"examples": 0, "ironmem_forged": 0, "peer_forged": 0, "failures": []}

    @settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.generate],
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(grammar.attack())
    def one(text: str) -> None:
        counts["examples"] += 1
        out = fence(text)
        if out and grammar.forged(out):
            counts["ironmem_forged"] += 1
            if len(counts["failures"]) < 5:
                counts["failures"].append({"input": text[:300], "problems": grammar.forged(out)})
        peer = peer_fence(text)
        if peer and grammar.forged(peer):
            counts["peer_forged"] += 1

    random.seed(seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one()
    counts["seconds"] = round(time.perf_counter() - t0, 1)
    return counts


def _sample(strategy: st.SearchStrategy[str], n: int) -> list[str]:
    out: list[str] = []

    @settings(
        max_examples=n,
        deadline=None,
        phases=[Phase.generate],
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(x: str) -> None:
        out.append(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collect()
    return out


NOTES = (
    "## Preferences\n- Prefers metric units; answers short.\n- Timezone: Europe/Berlin (UTC+1)\n"
    "User: Alice Example, works on [ironmem](https://example.com/ironmem) and reads /srv/data/notes.md\n"
    "Note: the staging DB is at postgres://db:5432/app | backups 02:00 | on-call rota in {team}.\n\n"
)
CODE = (
    "def render(items: list[str]) -> str:\n"
    "    # <div> wraps the list; <s> marks old prices; a < b and c > d; x | y\n"
    "    html = ['<div class=\"list\">'] + [f'<li><s>{i}</s></li>' for i in items] + ['</div>']\n"
    "    return '\\n'.join(html)  # Human: in a docstring is prose, 50% &amp; more\n\n"
)
PROSE = (
    "The user prefers metric units, drinks green tea in the morning and keeps notes in Markdown. "
    "Deploy with make release; the staging host is staging.example.com and backups run at 02:00. "
)
CYRILLIC = "Пользователь предпочитает метрические единицы и пьёт зелёный чай по утрам. "


def corpora(size: int, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    forgeries = _sample(
        st.one_of(
            grammar.fence_tag(), grammar.template_token(), grammar.turn_header(), grammar.note_header()
        ),
        400,
    )
    dense_parts: list[str] = []
    n = 0
    while n < size:
        piece = rng.choice(forgeries) + " " + rng.choice(["tea ", "ok ", "<div>x</div> ", "a < b ", ""])
        dense_parts.append(piece)
        n += len(piece)
    sparse_parts: list[str] = []
    n = 0
    while n < size:
        piece = PROSE * 10 + rng.choice(forgeries) + "\n"
        sparse_parts.append(piece)
        n += len(piece)
    return {
        "dense attacks": "".join(dense_parts)[:size],
        "sparse attacks": "".join(sparse_parts)[:size],
        "plain English": (PROSE * (size // len(PROSE) + 1))[:size],
        "Markdown notes": (NOTES * (size // len(NOTES) + 1))[:size],
        "code (HTML in Python)": (CODE * (size // len(CODE) + 1))[:size],
        "Cyrillic prose": (CYRILLIC * (size // len(CYRILLIC) + 1))[:size],
        "Cyrillic notes": ((CYRILLIC + "[x]: y\n") * (size // (len(CYRILLIC) + 7) + 1))[:size],
    }


def cpu_best(fn: Any, arg: str, repeat: int = 3) -> float:
    """Best CPU time of ``repeat`` cold calls (the fence remembers recent answers: that memory is cleared)."""
    best = float("inf")
    for _ in range(repeat):
        _find_cached.cache_clear()
        t0 = time.process_time()
        fn(arg)
        best = min(best, time.process_time() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 generated attacks instead of 10,000")
    ap.add_argument("--examples", type=int, help="generated attacks (default 10,000; 1,000 with --quick)")
    ap.add_argument(
        "--size", type=int, default=1_000_000, help="characters per throughput corpus (default 1 MB)"
    )
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    examples = args.examples or (1_000 if args.quick else 10_000)

    print(f"fence: {examples:,} generated attacks ...", flush=True)
    gen = run_grammar(examples, args.seed)
    print(
        table(
            ["system", "attacks", "forgery reaches the model", "rate"],
            [
                [
                    "ironmem fence",
                    f"{gen['examples']:,}",
                    f"{gen['ironmem_forged']:,}",
                    f"{gen['ironmem_forged'] / max(gen['examples'], 1):.2%}",
                ],
                [
                    "literal-tag peer",
                    f"{gen['examples']:,}",
                    f"{gen['peer_forged']:,}",
                    f"{gen['peer_forged'] / max(gen['examples'], 1):.2%}",
                ],
            ],
        )
    )
    for f in gen["failures"]:
        print("  survived:", repr(f["input"])[:200], f["problems"])
    print(f"({gen['seconds']} s)\n", flush=True)

    rows = []
    speed: dict[str, Any] = {}
    for name, text in corpora(args.size, args.seed).items():
        s = cpu_best(sanitize, text)
        f = cpu_best(fence, text)
        p = cpu_best(peer_sanitize, text)
        changed = sanitize(text) != text
        speed[name] = {
            "chars": len(text),
            "sanitize_s": round(s, 4),
            "fence_s": round(f, 4),
            "peer_s": round(p, 4),
            "changed": changed,
        }
        speed[name]["fence_mb_per_s"] = round(len(text) / 1e6 / max(f, 1e-9), 1)
        rows.append(
            [
                name,
                f"{len(text) / 1e6:.1f} MB",
                f"{s:.3f}",
                f"{f:.3f}",
                f"{len(text) / 1e6 / max(f, 1e-9):,.1f}",
                f"{p:.3f}",
                "yes" if changed else "no",
            ]
        )
    print("Throughput, CPU seconds (best of 3 cold calls; figures are noisy on a shared machine)")
    print(table(["corpus", "size", "sanitize s", "fence s", "fence MB/s", "peer s", "rewritten"], rows))
    worst = max(v["fence_s"] / (v["chars"] / 1e6) for v in speed.values())  # seconds per MB
    met = worst < 1.0 and gen["ironmem_forged"] == 0
    print(
        f"\nworst fence time per MB: {worst:.3f} s; target (< 1 s, no forgery through): {'MET' if met else 'MISSED'}"
    )

    result = {
        "benchmark": "fence_bench",
        **metadata(args.quick),
        "generated": gen,
        "speed": speed,
        "targets": {"no_forgery_and_under_1s_per_mb": {"met": met, "value_ms": round(worst * 1000, 1)}},
    }
    path = write_json("fence_bench", result)
    if args.json:
        write_json(args.json.stem, result, args.json.parent)
    print(f"JSON: {path}")
    return 0 if gen["ironmem_forged"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
