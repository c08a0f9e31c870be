"""Normalization for the scanner: one function, :func:`normalize`, gives every view the rules read.

Decode HTML entities, URL escapes and ``\\uXXXX`` escapes; remove zero-width and other invisible
characters; NFKC; casefold; and a skeleton view where confusable letters inside Latin words read as the
Latin letters they imitate. Every step is a single pass (linear in the input).

TODO(issue-13): switch to ``ironmem.core.text`` when it lands; only this module changes.
"""

from __future__ import annotations

import html
import re
import unicodedata
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

# Removed before matching (they render as nothing). ZWJ/ZWNJ are removed too; whether they are *reported*
# is decided separately, by context.
_STRIP_CHARS = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f"
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d\u206e\u206f"
    "\u3164\ufeff\uffa0"
)
_STRIP_TABLE: dict[int, None] = {ord(c): None for c in _STRIP_CHARS}
_STRIP_TABLE.update({cp: None for cp in range(0xFE00, 0xFE10)})
_STRIP_TABLE.update({cp: None for cp in range(0xE0000, 0xE0080)})
_STRIP_TABLE.update({cp: None for cp in range(0xE0100, 0xE01F0)})

# Confusable letters that NFKC keeps, mapped to the Latin letter they imitate (a compact subset of Unicode
# TR39 confusables: the Cyrillic, Greek, Armenian, IPA and small-capital letters used in real attacks).
_CONFUSABLE_PAIRS = {
    # Cyrillic
    "а": "a",
    "в": "b",
    "е": "e",
    "ё": "e",
    "є": "e",
    "г": "r",
    "һ": "h",
    "і": "i",
    "ї": "i",
    "ј": "j",
    "к": "k",
    "м": "m",
    "н": "h",
    "о": "o",
    "п": "n",
    "р": "p",
    "с": "c",
    "т": "t",
    "у": "y",
    "ү": "y",
    "х": "x",
    "ѕ": "s",
    "ԁ": "d",
    "ԛ": "q",
    "ԝ": "w",
    "ѡ": "w",
    "ӏ": "l",
    "ɩ": "l",
    "ь": "b",
    "ъ": "b",
    "А": "A",
    "В": "B",
    "Е": "E",
    "Ё": "E",
    "Є": "E",
    "Н": "H",
    "І": "I",
    "Ї": "I",
    "Ј": "J",
    "К": "K",
    "М": "M",
    "О": "O",
    "Р": "P",
    "С": "C",
    "Т": "T",
    "У": "Y",
    "Х": "X",
    "Ѕ": "S",
    "Ԁ": "D",
    "Ԛ": "Q",
    "Ԝ": "W",
    "Ү": "Y",
    "Ӏ": "I",
    # Greek
    "α": "a",
    "β": "b",
    "γ": "y",
    "ε": "e",
    "η": "n",
    "ι": "i",
    "κ": "k",
    "ν": "v",
    "ο": "o",
    "ρ": "p",
    "τ": "t",
    "υ": "u",
    "χ": "x",
    "ϲ": "c",
    "ϳ": "j",
    "Α": "A",
    "Β": "B",
    "Ε": "E",
    "Ζ": "Z",
    "Η": "H",
    "Ι": "I",
    "Κ": "K",
    "Μ": "M",
    "Ν": "N",
    "Ο": "O",
    "Ρ": "P",
    "Τ": "T",
    "Υ": "Y",
    "Χ": "X",
    "Ϲ": "C",
    # Armenian
    "ո": "n",
    "ս": "u",
    "օ": "o",
    "ց": "g",
    "հ": "h",
    "ա": "w",
    "զ": "q",
    "Ս": "U",
    "Օ": "O",
    # Latin-script look-alikes (IPA, small capitals, dotless letters)
    "ı": "i",
    "ȷ": "j",
    "ɑ": "a",
    "ɡ": "g",
    "ɢ": "g",
    "ɪ": "i",
    "ʏ": "y",
    "ʀ": "r",
    "ɴ": "n",
    "ʟ": "l",
    "ʜ": "h",
    "ʙ": "b",
    "ᴀ": "a",
    "ᴄ": "c",
    "ᴅ": "d",
    "ᴇ": "e",
    "ᴊ": "j",
    "ᴋ": "k",
    "ᴍ": "m",
    "ᴏ": "o",
    "ᴘ": "p",
    "ᴛ": "t",
    "ᴜ": "u",
    "ᴠ": "v",
    "ᴡ": "w",
    "ᴢ": "z",
    "ꜱ": "s",
    "ꜰ": "f",
    "ǫ": "q",
    "ɛ": "e",
    "ɔ": "c",
    "ʋ": "v",
    "ɯ": "w",
    "ſ": "s",
    "ℓ": "l",
    "ⅼ": "l",
    # Cherokee capitals that imitate Latin
    "Ꭺ": "A",
    "Ᏼ": "B",
    "Ꮯ": "C",
    "Ꭼ": "E",
    "Ꮋ": "H",
    "Ꭻ": "J",
    "Ꮶ": "K",
    "Ꮇ": "M",
    "Ꮲ": "P",
    "Ꭲ": "T",
}
_SKELETON_TABLE = {ord(k): v for k, v in _CONFUSABLE_PAIRS.items()}
# Scripts whose letters, mixed with Latin letters in one word, make a homoglyph spelling.
_FOREIGN_CONFUSABLES = frozenset(
    k for k in _CONFUSABLE_PAIRS if "\u0370" <= k <= "\u058f" or "\u13a0" <= k <= "\u13ff"
)
# Latin-script look-alikes (legitimate in Turkish, IPA...): flagged only when they spell a sensitive word.
_LATIN_LOOKALIKES = frozenset(k for k in _CONFUSABLE_PAIRS if k not in _FOREIGN_CONFUSABLES)

_SENSITIVE_WORDS = frozenset(
    [
        "ignore",
        "ignoring",
        "disregard",
        "forget",
        "previous",
        "prior",
        "above",
        "instructions",
        "instruction",
        "rules",
        "guidelines",
        "system",
        "prompt",
        "prompts",
        "jailbreak",
        "jailbroken",
        "bypass",
        "safety",
        "disable",
        "policy",
        "policies",
        "evade",
        "filter",
        "filtering",
        "filters",
        "reveal",
        "password",
        "passwords",
        "secret",
        "secrets",
        "admin",
        "administrator",
        "override",
        "restrictions",
        "unrestricted",
        "restricted",
        "dan",
        "developer",
        "mode",
        "root",
        "sudo",
        "execute",
        "send",
        "token",
        "tokens",
        "credentials",
        "key",
        "keys",
        "api",
        "print",
        "output",
        "display",
        "confidential",
        "hidden",
        "unfiltered",
        "uncensored",
        "censorship",
        "limits",
        "command",
        "commands",
        "obey",
        "comply",
    ]
)

_ENTITY_RE = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?")
_PCT_RE = re.compile(r"%[0-9a-fA-F]{2}")
# ``\\uD83D\\uDE00`` (a UTF-16 surrogate pair, as JSON writes characters beyond the BMP) decodes to one character.
_BSL_RE = re.compile(
    r"\\u([dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})"
)
_QUOTE_JOIN_RE = re.compile(r"[\"']\s*,\s*[\"']")
_WORD_RE = re.compile(r"[^\W\d_]+")


@dataclass
class Views:
    """The texts the detectors read."""

    raw: str
    dec: str  # decoded, invisibles removed, NFKC; case kept
    norm: str  # dec casefolded
    skel: str  # norm with confusables mapped to Latin
    decoded_escapes: int  # how many escapes were decoded (entities, %XX, \\uXXXX)
    confusable_spans: list[tuple[int, int]] = field(default_factory=list)


def _decode_backslash(m: re.Match[str]) -> str:
    if m.group(1):  # a surrogate pair: the one character it encodes
        high, low = int(m.group(1)[:4], 16), int(m.group(1)[6:], 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    value = int(m.group(2) or m.group(3), 16)
    return m.group(0) if 0xD800 <= value <= 0xDFFF else chr(value)  # a lone half stays as written


def _decode(text: str) -> tuple[str, int]:
    out = text
    n = 0
    for _ in range(2):
        before = out
        if "&" in out and _ENTITY_RE.search(out):
            n += len(_ENTITY_RE.findall(out))
            out = html.unescape(out)
        if "%" in out and _PCT_RE.search(out):
            n += len(_PCT_RE.findall(out))
            out = urllib.parse.unquote(out, errors="replace")
        if "\\" in out and _BSL_RE.search(out):
            n += len(_BSL_RE.findall(out))
            out = _BSL_RE.sub(_decode_backslash, out)
        if out == before:
            break
    if out.count('","') + out.count("','") >= 3:
        out = _QUOTE_JOIN_RE.sub("", out)
    return out, n


_STRIP_RE = re.compile(
    "[" + "".join(chr(c) for c in _STRIP_TABLE if c < 0x10000) + "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
_CONF_CHARS = "".join(re.escape(k) for k in _CONFUSABLE_PAIRS)
_LATIN_LOOK_CHARS = "".join(re.escape(k) for k in _LATIN_LOOKALIKES)
# Only words that mix Latin letters with confusables, or are spelled with Latin-script look-alikes only,
# are rewritten in the skeleton view: pure Cyrillic or Greek words stay as they are. Candidates are found
# by a C-level search for a Latin letter next to a confusable (or a run of look-alikes), then widened to
# the whole word.
_LATIN_RANGE = "a-zA-Z\u00c0-\u024f"
_ADJ_RE = re.compile(
    rf"[{_LATIN_RANGE}][{_CONF_CHARS}]|[{_CONF_CHARS}][{_LATIN_RANGE}]|[{_LATIN_LOOK_CHARS}]{{2,}}"
)
_ANY_CONF_RE = re.compile(f"[{_CONF_CHARS}]")


_NEAR_STEPS = 1000  # rare characters looked at one by one before the plain search takes over


def finditer_near(rx: re.Pattern[str], rare: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The matches of ``rx.finditer(text)`` for a regex without lookbehind each of whose matches has a
    character of the class ``rare`` (one character, rare in ordinary text) at its start or just after it:
    only those two positions are tried (``match`` there reads what ``search`` reads), so ordinary text is
    skipped at the speed of a character-class search. After ``_NEAR_STEPS`` rare characters (a text in
    another script) the plain search goes on from where this stopped."""
    pos, n = 0, len(text)
    for _ in range(_NEAR_STEPS):
        c = rare.search(text, pos)
        if c is None:
            return
        p = c.start()
        m = (rx.match(text, p - 1) if p - 1 >= pos else None) or rx.match(text, p)
        if m is None:
            pos = p + 1
            continue
        yield m
        pos = m.end()
        if pos >= n:
            return
    yield from rx.finditer(text, pos)


def _confusable_words(dec: str) -> list[tuple[int, int]]:
    """Spans of the words in ``dec`` that the skeleton view rewrites."""
    spans: list[tuple[int, int]] = []
    last_end = -1
    n = len(dec)
    for m in finditer_near(_ADJ_RE, _ANY_CONF_RE, dec):
        if m.start() < last_end:
            continue
        s, e = m.start(), m.end()
        while s > 0 and dec[s - 1].isalpha():
            s -= 1
        while e < n and dec[e].isalpha():
            e += 1
        spans.append((s, e))
        last_end = e
    return spans


def _skeleton(dec: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return dec.casefold()
    parts: list[str] = []
    last = 0
    for s, e in spans:
        parts.append(dec[last:s])
        parts.append(dec[s:e].translate(_SKELETON_TABLE))
        last = e
    parts.append(dec[last:])
    return "".join(parts).casefold()


def normalize(text: str) -> Views:
    """All views of ``text`` the scanner reads (see the module docstring)."""
    dec, n = _decode(text)
    if dec.isascii():
        norm = dec.lower()
        return Views(text, dec, norm, norm, n)
    if _STRIP_RE.search(dec):
        dec = _STRIP_RE.sub("", dec)
    dec = unicodedata.normalize("NFKC", dec)
    norm = dec.casefold()
    spans = _confusable_words(dec) if _ANY_CONF_RE.search(dec) else []
    return Views(text, dec, norm, _skeleton(dec, spans), n, spans)
