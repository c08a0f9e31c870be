"""Prefetch and sync latency, p50 / p95, per external provider, against its real local server.

    python benchmarks/providers_latency.py               # every provider whose server venv is installed
    python benchmarks/providers_latency.py --quick       # fewer turns
    python benchmarks/providers_latency.py --only hindsight

For each provider it starts the real server (tests/servers.py: Hindsight with embedded PostgreSQL and no LLM,
OpenViking with local storage; both with the loopback MiniLM embedder), then through a real ``MemoryManager``:

- ``sync``: ``provider.sync_turn`` of N distinct turns (what ironmem's background worker runs per turn),
- ``prefetch``: ``Session.prefetch``, in a later session, of N questions about those turns (the turn's critical
  path: the provider's recall plus the built-in layer, the scan and the fence); ``recall hit`` is the share of
  questions whose own turn came back from the provider (from the built-in layer for ``builtin``),

and the same two operations on the built-in layer alone and on ``local_vector`` (SQLite + sqlite-vec, in-process,
with the same MiniLM embedder over HTTP) as peers measured in the same run. A provider whose server venv is
missing is reported as skipped with the reason (``bash tools/install_servers.sh``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _util import fmt_ms, metadata, summary_ms, table, write_json

PROVIDERS = ["builtin", "local_vector", "hindsight", "openviking"]

FACTS = [
    ("My sister {n} lives in Lisbon and works as a marine biologist", "Where does my sister {n} live?"),
    ("I parked the blue van number {n} on level three of the garage", "Where did I park van {n}?"),
    ("The wifi password hint for office {n} is the name of our first cat", "What is the wifi hint for office {n}?"),
    ("Project {n} ships on the second Tuesday of March", "When does project {n} ship?"),
    ("I am allergic to peanuts, so order {n} must be nut free", "Is order {n} allowed to contain nuts?"),
]


class HttpEmbedder:
    """list[str] -> vectors from the loopback OpenAI-style embedding server (the servers' own embedder)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def __call__(self, texts: list[str]) -> list[list[float]]:
        body = json.dumps({"input": texts, "model": "all-MiniLM-L6-v2"}).encode()
        request = urllib.request.Request(self.base_url + "/embeddings", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            data = json.loads(response.read())["data"]
        return [row["embedding"] for row in sorted(data, key=lambda r: r["index"])]


def turns(n: int) -> list[tuple[str, str]]:
    return [(FACTS[i % len(FACTS)][0].format(n=i), FACTS[i % len(FACTS)][1].format(n=i)) for i in range(n)]


def measure(name: str, provider: Any, n: int) -> dict[str, Any]:
    from ironmem import MemoryManager

    home = Path(tempfile.mkdtemp(prefix=f"ironmem-bench-{name}-"))
    data = turns(n)
    with MemoryManager(home=home, external=provider, prefetch_timeout=60) as manager:
        session = manager.start_session("bench", user_id="bench-user")
        sync_times: list[float] = []
        for fact, _ in data:
            if provider is None:  # the built-in layer's own turn write (search index)
                started = time.perf_counter()
                session.sync_turn(fact, "Noted.")
            else:
                started = time.perf_counter()
                provider.sync_turn(fact, "Noted.", session_id="bench")
            sync_times.append(time.perf_counter() - started)
        session.end()  # recall happens in a later session, as after a restart of the conversation
        manager.drain()
        session = manager.start_session("bench-later", user_id="bench-user")
        prefetch_times: list[float] = []
        hits = 0
        for i, (_, question) in enumerate(data):
            started = time.perf_counter()
            recall = session.prefetch(question)
            prefetch_times.append(time.perf_counter() - started)
            source = provider.name if provider is not None else None
            texts = [item.text for item in recall.items if source is None or item.source == source]
            hits += any(f" {i} " in f" {t.replace(',', ' ')} " for t in texts)
        health = manager.status()["providers"]
        session.end()
    return {
        "provider": name,
        "turns": n,
        "sync": summary_ms(sync_times),
        "prefetch": summary_ms(prefetch_times),
        "recall_hit_rate": round(hits / n, 3),
        "health": health,
    }


def run_provider(name: str, n: int, servers: dict[str, Any]) -> dict[str, Any]:
    from servers import EmbeddingServer, HindsightServer, OpenVikingServer, ServerUnavailable

    try:
        if name == "builtin":
            return measure(name, None, n)
        emb = servers.get("embed_obj")
        if emb is None:
            emb = EmbeddingServer()
            emb.__enter__()
            servers["embed_obj"] = emb
        if name == "local_vector":
            from ironmem.providers.local_vector import LocalVectorProvider

            path = Path(tempfile.mkdtemp(prefix="ironmem-bench-vec-")) / "v.db"
            return measure(name, LocalVectorProvider(HttpEmbedder(emb.base_url), path=path), n)
        if name == "hindsight":
            from ironmem.providers.hindsight import HindsightProvider

            with HindsightServer(emb) as server:
                provider = HindsightProvider(api_url=server.url, bank_id=f"bench{int(time.time())}").open()
                return measure(name, provider, n)
        if name == "openviking":
            from ironmem.providers.openviking import OpenVikingProvider

            with OpenVikingServer(emb) as server:
                return measure(name, OpenVikingProvider(url=server.url), n)
        raise ValueError(name)
    except ServerUnavailable as exc:
        return {"provider": name, "skipped": str(exc).splitlines()[0]}
    except ImportError as exc:
        return {"provider": name, "skipped": f"client not installed: {exc}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 turns instead of 40")
    ap.add_argument("--only", help=f"comma-separated subset of: {', '.join(PROVIDERS)}")
    ap.add_argument("--json", help="where to write the JSON results (default benchmarks/results/providers_latency.json)")
    args = ap.parse_args()
    wanted = args.only.split(",") if args.only else PROVIDERS
    unknown = [w for w in wanted if w not in PROVIDERS]
    if unknown:
        ap.error(f"unknown provider(s) {', '.join(unknown)}; choose from {', '.join(PROVIDERS)}")
    n = 10 if args.quick else 40
    servers: dict[str, Any] = {}
    results = []
    try:
        for name in wanted:
            print(f"-- {name}: {n} turns", flush=True)
            results.append(run_provider(name, n, servers))
    finally:
        emb = servers.get("embed_obj")
        if emb is not None:
            emb.__exit__(None, None, None)
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append([r["provider"], "skipped", "-", r["skipped"][:70]])
            continue
        rows.append([r["provider"], f"{fmt_ms(r['prefetch']['p50_ms'])} / {fmt_ms(r['prefetch']['p95_ms'])}",
                     f"{fmt_ms(r['sync']['p50_ms'])} / {fmt_ms(r['sync']['p95_ms'])}", f"{r['recall_hit_rate']:.0%}"])
    print()
    print(f"External provider latency, ms p50 / p95 ({n} turns, real local servers)")
    print(table(["provider", "prefetch (turn path)", "sync_turn (background)", "recall hit"], rows))
    payload = {"benchmark": "providers_latency", **metadata(args.quick), "results": results}
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    else:
        write_json("providers_latency", payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
