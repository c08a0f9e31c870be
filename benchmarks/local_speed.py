"""How fast the local engine evaluates a prompt: ironmem's ``LocalModel`` defaults against llama.cpp's own.

A cold prompt of about 1,100 tokens (the chat template, a memory-like system prompt, one user message) is evaluated
from an empty KV cache, one token sampled, under four settings of the same packaged SmolLM2-135M weights: the
engine's defaults (the Q4_1 file as shipped, flash attention off: the peer), flash attention on, the weights
converted once to F16 (no precision lost, see ``docs/local-model.md``), and both (ironmem's default). Each setting
runs in its own process (one model in memory at a time; the first process also warms the page cache, and every
setting is measured ``--repeat`` times after one warm-up request). Prints prompt tokens per second of wall time
and per CPU second, and each setting's speed-up over the peer measured in the same run; ``--json`` writes them.

Wall time is what a user waits for; on a shared machine it also counts the waits for a core, so the load average
is printed beside it. Needs the extra ``ironmem[local]``::

    python benchmarks/local_speed.py [--repeat 3] [--json benchmarks/results/local_speed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _util import metadata, table, write_json

#: (label, weights conversion, flash attention); the first is the peer the others are compared with.
SETTINGS: tuple[tuple[str, str | None, bool], ...] = (
    ("engine defaults (Q4_1, flash off)", None, False),
    ("Q4_1, flash on", None, True),
    ("F16, flash off", "F16", False),
    ("F16, flash on (LocalModel default)", "F16", True),
)
NOTES = 60


def prompt_messages() -> list[dict[str, str]]:
    notes = " ".join(f"Note {i}: the user prefers tea over coffee and works on project {i % 7}." for i in range(NOTES))
    return [{"role": "system", "content": notes}, {"role": "user", "content": "Say hi."}]


def measure(requantize: str | None, flash_attn: bool, repeat: int) -> dict[str, Any]:
    """One setting, in this process: wall and CPU seconds of each cold prompt evaluation."""
    from ironmem.local import LocalModel

    model = LocalModel(n_ctx=4096, flash_attn=flash_attn, requantize=requantize)
    messages = prompt_messages()
    model.chat(messages, max_tokens=1)  # warm-up: first touches of the weights
    runs = []
    for _ in range(repeat):
        model.reset()
        cpu, wall = time.process_time(), time.perf_counter()
        generation = model.chat(messages, max_tokens=1)
        runs.append({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                     "evaluated": generation.evaluated})
    return {"weights": model.model_path.name, "n_threads": model.llm.n_threads,
            "n_threads_batch": model.llm.context_params.n_threads_batch, "runs": runs,
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="measured requests per setting (default 3)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one setting, print its JSON
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.one is not None:
        requantize, flash = args.one.split(",")
        print(json.dumps(measure(requantize or None, flash == "1", args.repeat)))
        return 0
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("local_speed needs the local model: pip install 'ironmem[local]'", file=sys.stderr)
        return 2
    results = []
    for label, requantize, flash in SETTINGS:
        out = subprocess.run([sys.executable, __file__, "--one", f"{requantize or ''},{int(flash)}",
                              "--repeat", str(args.repeat)], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        best = min(row["runs"], key=lambda r: r["wall_s"])
        row.update(label=label, tokens=best["evaluated"],
                   tok_per_wall_s=best["evaluated"] / best["wall_s"],
                   tok_per_cpu_s=best["evaluated"] / min(r["cpu_s"] for r in row["runs"]))
        results.append(row)
        print(f"  {label}: {row['tok_per_wall_s']:.0f} tokens/s (load {row['load_average_1m']})", flush=True)
    peer = results[0]
    rows = [[r["label"], f"{r['tokens']:,}", f"{min(x['wall_s'] for x in r['runs']):.2f}",
             f"{r['tok_per_wall_s']:.0f}", f"{r['tok_per_cpu_s']:.0f}",
             f"{r['tok_per_wall_s'] / peer['tok_per_wall_s']:.2f}x", str(r["load_average_1m"])] for r in results]
    print()
    print(table(["setting", "prompt tokens", "best wall s", "tokens/s wall", "tokens/s CPU", "vs engine defaults",
                 "load"], rows))
    doc = {"benchmark": "local_speed", "meta": metadata(quick=False), "settings": results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    else:
        write_json("local_speed", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
