"""Encoded payloads: base64, base32, hex runs that decode to readable text (scanned again by the caller)."""

from __future__ import annotations

import base64
import binascii
import re

from .normalize import Views

_B64_RE = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{16,}={0,2}")
_B32_RE = re.compile(r"(?<![A-Z2-7])[A-Z2-7]{16,}={0,6}")
_HEX_RE = re.compile(r"(?:\\x[0-9a-fA-F]{2}){6,}|(?<![0-9a-zA-Z])[0-9a-fA-F]{16,}")
_HEX_SHAPE = str.maketrans(
    {
        chr(c): ("h" if chr(c) in "0123456789abcdefABCDEF" else " " if chr(c) == " " else "x")
        for c in range(128)
    }
)
_SPACED_HEX_RE = re.compile(r"(?<![\w])(?:[0-9a-fA-F]{2}[ \t]){7,}[0-9a-fA-F]{2}(?![\w])")
_ROT13_HINTS = frozenset(
    [
        "gur",
        "naq",
        "lbh",
        "lbhe",
        "nyy",
        "vf",
        "gb",
        "sbe",
        "jvgu",
        "guvf",
        "vafgehpgvbaf",
        "cerivbhf",
        "vtaber",
        "flfgrz",
        "cebzcg",
        "erirny",
        "abj",
        "ehyrf",
    ]
)


def _printable_text(b: bytes) -> str | None:
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(s) < 6:
        return None
    good = sum(1 for c in s if c.isprintable() or c in "\n\t")
    if good / len(s) < 0.95 or not re.search(r"[A-Za-z\u0400-\u04ff\u4e00-\u9fff]{3}", s):
        return None
    if " " not in s and len(s) > 24:
        return None
    return s


def _at(text: str, tok: str) -> int:
    """Where a token of ``text`` starts (its first occurrence): looked up only for a token that decodes, so
    the search does not run once per long token of a long text."""
    return max(0, text.find(tok))


def decoded_payloads(v: Views, limit: int | None = None) -> list[tuple[str, str, tuple[int, int]]]:
    """(kind, decoded text, span) for every base64 / base32 / hex run that decodes to readable text (the
    first ``limit`` of them when given: the caller reads no more)."""
    out: list[tuple[str, str, tuple[int, int]]] = []
    long_tokens = [t for t in v.dec.split() if len(t) >= 16]
    ascii_dec = v.dec if v.dec.isascii() else v.dec.encode("ascii", "replace").decode("ascii")
    if "hh hh hh hh hh hh hh hh" in ascii_dec.translate(_HEX_SHAPE):
        long_tokens += [re.sub(r"\s", "", m) for m in _SPACED_HEX_RE.findall(v.dec)]
    for tok_src in long_tokens:
        if limit is not None and len(out) >= limit:
            return out[:limit]
        if "://" in tok_src or tok_src.startswith(("http", "www.")):
            continue
        for m in _B64_RE.finditer(tok_src):
            tok = m.group(0)
            if tok.isalpha() and (tok.islower() or tok.isupper()):
                continue  # a long ordinary word
            if not (
                any(c.isdigit() or c in "+/=" for c in tok)
                or (any(c.islower() for c in tok) and sum(c.isupper() for c in tok) >= 3)
            ):
                continue
            raw = tok.rstrip("=").replace("-", "+").replace("_", "/")
            try:
                s = _printable_text(base64.b64decode(raw + "=" * (-len(raw) % 4)))
            except (binascii.Error, ValueError):
                s = None
            if s:
                out.append(("base64", s, (_at(v.dec, tok_src) + m.start(), _at(v.dec, tok_src) + m.end())))
        for m in _B32_RE.finditer(tok_src):
            tok = m.group(0).rstrip("=")
            try:
                s = _printable_text(base64.b32decode(tok + "=" * (-len(tok) % 8)))
            except (binascii.Error, ValueError):
                s = None
            if s:
                out.append(("base32", s, (_at(v.dec, tok_src) + m.start(), _at(v.dec, tok_src) + m.end())))
        for m in _HEX_RE.finditer(tok_src):
            hexs = m.group(0).replace("\\x", "")
            if len(hexs) % 2:
                hexs = hexs[:-1]
            try:
                s = _printable_text(bytes.fromhex(hexs))
            except ValueError:
                s = None
            if s:
                out.append(("hex", s, (_at(v.dec, tok_src) + m.start(), _at(v.dec, tok_src) + m.end())))
    return out if limit is None else out[:limit]




# ---------------------------------------------------------------- more encodings (decoded, then scanned again)
# Each decoder is one regex pass plus a decode of the matched runs: linear in the input.

# (Each pattern starts with a character class, its lookbehind after it: the regex engine then skips to the
# next character of that class instead of trying the whole pattern at every position. The same matches as
# ``(?<![01])(?:[01]{8}[ \t,;]*){6,}`` and ``(?<![\w.-])(?:[.\-]{1,7}(?: / | {1,3}|/)){6,}[.\-]{1,7}(?![\w.-])``:
# the first repetition written out, its first character before the lookbehind.)
_BINARY_RE = re.compile(r"[01](?<![01][01])[01]{7}[ \t,;]*(?:[01]{8}[ \t,;]*){5,}")
_MORSE_RE = re.compile(
    r"[.\-](?<![\w.-][.\-])[.\-]{0,6}(?: / | {1,3}|/)(?:[.\-]{1,7}(?: / | {1,3}|/)){5,}[.\-]{1,7}(?![\w.-])"
)
_A85_RE = re.compile(r"<~([!-u\s]{10,}?)~>")
_B85_RE = re.compile(r"(?<![!-~])[0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]{20,}")
_MORSE = {
    ".-": "a", "-...": "b", "-.-.": "c", "-..": "d", ".": "e", "..-.": "f", "--.": "g", "....": "h", "..": "i",
    ".---": "j", "-.-": "k", ".-..": "l", "--": "m", "-.": "n", "---": "o", ".--.": "p", "--.-": "q", ".-.": "r",
    "...": "s", "-": "t", "..-": "u", "...-": "v", ".--": "w", "-..-": "x", "-.--": "y", "--..": "z",
    "-----": "0", ".----": "1", "..---": "2", "...--": "3", "....-": "4", ".....": "5", "-....": "6",
    "--...": "7", "---..": "8", "----.": "9", ".-.-.-": ".", "--..--": ",", "..--..": "?", "-.-.--": "!",
    "-....-": "-", "-..-.": "/", ".--.-.": "@", "---...": ":",
}
#: Frequent English words written backwards: text that reads right-to-left is read again reversed.
_REVERSED_HINTS = frozenset(
    ["eht", "dna", "uoy", "ruoy", "lla", "rof", "siht", "htiw", "taht", "snoitcurtsni", "suoiverp", "erongi",
     "metsys", "tpmorp", "laever", "won", "selur", "ot", "fo", "em", "wohs", "dnes", "drowssap", "terces"]
)
_WORDS_RE = re.compile(r"[a-z]{2,}")


def _morse_decode(run: str) -> str:
    words = re.split(r" / |/| {3}", run.strip())
    return " ".join("".join(_MORSE.get(c, "") for c in w.split()) for w in words)


def more_decodings(v: Views, limit: int = 20_000) -> list[tuple[str, str, tuple[int, int]]]:
    """(kind, decoded text, span) for binary octets, Morse code, Ascii85/Base85 runs, text written backwards
    each of which reads as text once undone (quoted fragments are joined by :func:`normalize` already)."""
    out: list[tuple[str, str, tuple[int, int]]] = []
    dec = v.dec
    if "0" in dec and "1" in dec:
        for m in _BINARY_RE.finditer(dec):
            bits = re.sub(r"[^01]", "", m.group(0))
            s = _printable_text(bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits) - 7, 8)))
            if s:
                out.append(("binary", s, m.span()))
    if ".-" in dec or "-." in dec:
        for m in _MORSE_RE.finditer(dec):
            s = _morse_decode(m.group(0))
            if len(s) >= 8 and " " in s:
                out.append(("morse", s, m.span()))
    if "<~" in dec:
        for m in _A85_RE.finditer(dec):
            try:
                s = _printable_text(base64.a85decode(re.sub(r"\s", "", m.group(1))))
            except ValueError:
                s = None
            if s:
                out.append(("ascii85", s, m.span()))
    for tok in (t for t in v.raw.split() if len(t) >= 20):  # raw: %XX in Base85 is not a URL escape
        if not any(c in tok for c in "!#$%&()*;<>?@^`{|}~") or "://" in tok:
            continue
        for m in _B85_RE.finditer(tok):
            try:
                s = _printable_text(base64.b85decode(m.group(0)))
            except ValueError:
                s = None
            if s:
                at = max(0, v.raw.find(tok))
                out.append(("base85", s, (at + m.start(), at + m.end())))
    head = v.norm[:limit]
    words = _WORDS_RE.findall(head)
    if words and sum(w in _REVERSED_HINTS for w in words) >= max(3, len(words) // 5):
        out.append(("reversed", head[::-1], (0, len(head))))
    return out
