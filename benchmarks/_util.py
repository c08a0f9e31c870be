"""Small helpers shared by the benchmark scripts: timing statistics, tables, run metadata."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
_SHARED_CACHE = ROOT.parent / "shared" / "tiktoken-cache"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _SHARED_CACHE.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED_CACHE)  # offline encodings shipped next to the repo


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    """p50 / p95 / mean / max in milliseconds, and the sample count."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 4),
        "p95_ms": round(percentile(ms, 95), 4),
        "mean_ms": round(sum(ms) / len(ms), 4) if ms else 0.0,
        "max_ms": round(max(ms), 4) if ms else 0.0,
    }


def fmt_ms(value: float) -> str:
    if value < 0.1:
        return f"{value:.3f}"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}x"
    if value >= 1:
        return f"{value:.1f}x"
    return f"{value:.2f}x" if value >= 0.01 else f"{value:.3f}x"


def table(headers: list[str], rows: list[list[str]], left: int = 2) -> str:
    """A plain-text table, columns right-aligned except the first ``left``."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(str(cell).ljust(widths[i]) if i < left else str(cell).rjust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "ironmem"], cwd=ROOT, capture_output=True, text=True, timeout=10,
            check=False,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    """What the figures were measured on (they only compare on the same machine)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(load[0], 2),
    }


def metadata(quick: bool) -> dict[str, Any]:
    return {
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": quick,
        "machine": machine(),
    }


def write_json(name: str, data: dict[str, Any], out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
