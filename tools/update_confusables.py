"""Refresh the vendored UTS #39 confusables data used by ``ironmem.core.text``.

Usage::

    python tools/update_confusables.py                # latest from unicode.org
    python tools/update_confusables.py --from FILE    # a confusables.txt you already have

The new file must parse (every data line ``XXXX ; YYYY [ZZZZ ...] ; MA``), carry a ``# Version:`` header and
state a ``# total:`` that matches its line count; otherwise nothing is written. Run the text and fence tests
afterwards.
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.request
from pathlib import Path

URL = "https://www.unicode.org/Public/security/latest/confusables.txt"
TARGET = Path(__file__).resolve().parents[1] / "ironmem" / "core" / "data" / "confusables.txt"
_LINE = re.compile(r"^[0-9A-F]{4,6} ;\t[0-9A-F]{4,6}(?: [0-9A-F]{4,6})* ;\tMA\t#")


def check(text: str) -> str:
    """Return the version of a confusables.txt, or raise ValueError saying what is wrong with it."""
    version = re.search(r"^# Version: (\S+)", text, re.MULTILINE)
    total = re.search(r"^# total: (\d+)", text, re.MULTILINE)
    if not version or not total:
        raise ValueError("no '# Version:' or '# total:' header: is this confusables.txt?")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    bad = [ln for ln in lines if not _LINE.match(ln.lstrip("\ufeff"))]
    if bad:
        raise ValueError(f"{len(bad)} lines do not parse, first: {bad[0]!r}")
    if len(lines) != int(total.group(1)):
        raise ValueError(f"header says {total.group(1)} mappings, file has {len(lines)}")
    return version.group(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", help="read this file instead of downloading")
    args = parser.parse_args(argv)
    if args.source:
        text = Path(args.source).read_text(encoding="utf-8-sig")
    else:
        with urllib.request.urlopen(URL, timeout=60) as resp:
            text = resp.read().decode("utf-8-sig")
    try:
        version = check(text)
    except ValueError as exc:
        print(f"not updated: {exc}", file=sys.stderr)
        return 1
    tmp = TARGET.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(TARGET)
    print(f"confusables.txt {version} written to {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
