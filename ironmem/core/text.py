"""The one text-normalization module: how ironmem reads text that may be trying to hide what it says.

The fence (:mod:`ironmem.core.fence`) and the write-time scanner both match patterns against a *folded* view of
the text, never against the raw characters, so a pattern written once for ``memory context`` also matches
``ｍｅｍ0ｒу\u200bcоntехt``, ``&#00109;emory-context``, ``\\6d emory context`` and ``m e m o r y``. Folding is:

1. **Escape decoding** (:func:`decode_escapes`), repeated until nothing changes (at most
   :data:`MAX_DECODE_ROUNDS` rounds, so ``&amp;lt;`` and ``%253C`` decode too): HTML named and numeric
   references (any number of leading zeros, with or without ``;``), URL ``%XX`` (UTF-8) and ``%uXXXX``,
   JavaScript / Python / C escapes (``\\xHH``, ``\\x{H}``, ``\\uHHHH``, ``\\u{H}``, ``\\UHHHHHHHH``,
   ``\\N{NAME}``, ``\\n``, ``\\t``, ``\\/``), octal ``\\NNN`` for printable ASCII when no hex digit
   follows (``\\155``), CSS escapes otherwise (``\\6d `` with its optional
   space), quoted-printable ``=3C`` and ``U+003C`` notation. An escape is decoded whatever the context,
   because the reader (a language model) decodes them whatever the context.
2. **Bidi overrides**: a run after RIGHT-TO-LEFT OVERRIDE (U+202E) is *displayed* reversed with mirrored
   brackets; the folded view holds the logical run, the reversed run and the reversed-mirrored run, so a tag
   hidden by reversal is seen in every reading order. Runs are read so *before* escape decoding (an escape
   written backwards, ``}O RETTEL LLAMS NITAL{N\\``, reads forwards once displayed) and again after it when
   decoding produced an override (``&#x202e;``). The readings are separated by U+0000; a NUL in the text itself
   (or decoded from ``&#0;``) is read as U+0001, an ordinary separator, so it can neither pose as that boundary
   nor hide a token.
3. **Per character** (:func:`fold_char`): Default_Ignorable_Code_Point characters are removed (zero-width
   characters, joiners, soft hyphen, variation selectors, bidi controls, Unicode tag characters, the Hangul
   fillers U+115F, U+1160, U+3164, U+FFA0, ...; the property comes from the ``regex`` module's Unicode
   database), then NFKD, combining marks dropped, case folded, and the UTS #39 confusable *skeleton* mapping
   applied from Unicode's own ``confusables.txt`` (vendored in ``ironmem/core/data/`` with its licence;
   ``tools/update_confusables.py`` refreshes it), repeated until stable. Punctuation whose prototype is not
   structural is read by its Unicode name (LEFT ANGLE BRACKET is ``<``, FULLWIDTH LEFT SQUARE BRACKET
   ``[``). The letters ``i`` and ``l`` (and with them ``I``, ``1``, ``ı``, ``і`` ...) fold to one letter
   ``i``: UTS #39 keeps them apart only by case.
   A non-letter whose skeleton is ``l`` (``∣``, ``｜``, ``│`` ...) is a vertical bar ``|``.
4. **Separators**: every character that is neither a letter, a digit nor one of the *structural* characters
   :data:`STRUCTURAL` (``< > / [ ] { } | : # * =`` and the line break) is a separator. ``fold(text)`` drops
   them (``</memory   context>`` reads ``</memorycontext>``: the letters between separators collapse);
   ``fold(text, spaces=True)`` keeps one space per run instead and joins runs of single spaced-out letters
   (``i g n o r e`` reads ``ignore``), which is the view a word-based scanner wants.

Everything is linear in the length of the text: each step is one pass (C-level ``str.translate`` with a
per-character cache, ``bytes.translate`` for long ASCII runs, or one regex pass; escapes are found by one
``split`` and each distinct escape is decoded once) and the number of decoding rounds is bounded.

Because folding changes lengths, :func:`fold_map` also returns where each folded character came from, so a
match in the folded view can be cut out of the original text at exactly the right place.

The fold is a *matching* view, never shown to anyone: it is lossy on purpose (``0`` folds to ``o``, ``I`` and
``1`` to ``i``; a character whose UTS #39 prototype is ``rn``, such as ``ｍ``, folds to ``m``: the two-letter
``rn`` itself is left to fuzzy matching by the caller). Match it against patterns built with :func:`fold`
too, never against hand-folded literals.

Example:
    >>> fold("</ＭＥＭ0ＲＹ\u200b-cоntехt>")
    '</memorycontext>'
    >>> fold("&#00060;/memory%20context\\\\3e ") == fold("</memory context>")
    True
    >>> decode_escapes("%u003c\\\\N{SOLIDUS}x&#x3E;")
    '</x>'
    >>> strip_invisibles("a\u200bb\u3164c\u202ed")
    'abcd'
    >>> skeleton("pаypаl") == skeleton("paypal")
    True
"""

from __future__ import annotations

import bisect
import functools
import html
import itertools
import operator
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

__all__ = [
    "MAX_DECODE_ROUNDS",
    "STRUCTURAL",
    "Folded",
    "confusables",
    "confusables_version",
    "decode_escapes",
    "fold",
    "fold_char",
    "fold_map",
    "is_invisible",
    "lone_surrogate",
    "mixed_words",
    "plain",
    "skeleton",
    "well_formed",
    "strip_invisibles",
]

MAX_DECODE_ROUNDS = 6
"""Escape decoding stops after this many rounds (``&amp;amp;lt;`` needs three)."""

STRUCTURAL = frozenset("<>/[]{}|:#*=\n")
"""Characters the folded view keeps: the ones markup, tags, chat-template tokens and headers are made of."""

_DATA = Path(__file__).with_name("data") / "confusables.txt"

# ------------------------------------------------------------------------------------------------ Unicode data

_INVISIBLE_RE = regex.compile(r"\p{Default_Ignorable_Code_Point}+")


def is_invisible(ch: str) -> bool:
    """True for a Default_Ignorable_Code_Point character (renders as nothing).

    Example:
        >>> is_invisible("\u200d"), is_invisible("\U000e0041"), is_invisible("a")
        (True, True, False)
    """
    return _INVISIBLE_RE.fullmatch(ch) is not None


def strip_invisibles(text: str) -> str:
    """``text`` without Default_Ignorable_Code_Point characters (zero-width, bidi controls, tags, fillers).

    Example:
        >>> strip_invisibles("mem\u200dory\U000e0020")
        'memory'
    """
    return _INVISIBLE_RE.sub("", text)


@functools.cache
def _confusables_table() -> tuple[dict[str, str], str]:
    table: dict[str, str] = {}
    version = "unknown"
    with _DATA.open(encoding="utf-8-sig") as fh:
        for line in fh:
            if line.startswith("#"):
                if line.startswith("# Version:"):
                    version = line.split(":", 1)[1].strip()
                continue
            data = line.split("#", 1)[0].strip()
            if not data:
                continue
            source, target, _kind = (part.strip() for part in data.split(";"))
            table[chr(int(source, 16))] = "".join(chr(int(cp, 16)) for cp in target.split())
    return table, version


def confusables() -> dict[str, str]:
    """UTS #39 ``confusables.txt`` as ``{source character: prototype string}`` (read once, cached).

    Example:
        >>> confusables()["\u0430"]  # CYRILLIC SMALL LETTER A
        'a'
    """
    return _confusables_table()[0]


def confusables_version() -> str:
    """The Unicode version of the vendored ``confusables.txt`` (its ``# Version:`` header).

    Example:
        >>> confusables_version() >= "15"
        True
    """
    return _confusables_table()[1]


def skeleton(text: str) -> str:
    """The UTS #39 skeleton of ``text``: NFD, each character replaced by its prototype, NFD again.

    Two strings are confusable when their skeletons are equal. Case is kept, as the standard says; use
    :func:`fold` for case-insensitive matching.

    Example:
        >>> skeleton("ⲟ"), skeleton("×")
        ('o', 'x')
    """
    table = confusables()
    out = unicodedata.normalize("NFD", text)
    out = "".join(table.get(ch, ch) for ch in out)
    return unicodedata.normalize("NFD", out)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate (U+D800-U+DFFF, which no UTF-8 text can hold) as U+FFFD.

    One character for one, so spans found in the result are spans of ``text``. Such code points reach Python
    strings from JSON (``"\\ud83d"``) or from bytes decoded with ``surrogateescape``; the matchers work on UTF-8.

    Example:
        >>> well_formed("tea \\ud800 time")
        'tea \ufffd time'
    """
    if lone_surrogate(text) is None:
        return text
    return _SURROGATE_RE.sub("\ufffd", text)


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone UTF-16 surrogate in ``text``, or None (ASCII text costs one check).

    Example:
        >>> lone_surrogate("ok"), lone_surrogate("a\\udc00b")
        (None, 1)
    """
    if text.isascii():
        return None
    m = _SURROGATE_RE.search(text)
    return m.start() if m else None


# ------------------------------------------------------------------------------------------------ escapes

# One alternation, dispatched on the first character. Longest forms first inside each family.
_ESCAPE_RE = regex.compile(
    r"""
      &\#[xX]0*(?P<hx>[0-9a-fA-F]{1,6});?
    | &\#0*(?P<dec>[0-9]{1,7});?
    | &(?P<name>[A-Za-z][A-Za-z0-9]{1,31};?)
    | %[uU](?P<pu>[0-9a-fA-F]{4})
    | (?P<pct>(?:%[0-9a-fA-F]{2})+)
    | \\u\{0*(?P<ub>[0-9a-fA-F]{1,6})\}
    | \\u(?P<u4>[0-9a-fA-F]{4})
    | \\U(?P<u8>[0-9a-fA-F]{8})
    | \\x\{0*(?P<xb>[0-9a-fA-F]{1,6})\}
    | \\x(?P<x2>[0-9a-fA-F]{2})
    | \\N\{(?P<uname>[A-Za-z0-9][A-Za-z0-9 \-]{0,87})\}
    | \\(?P<oct>0[4-7][0-7]|1[0-7][0-7])(?![0-9a-fA-F])
    | \\(?P<css>[0-9a-fA-F]{1,6})[ \t\n]?
    | \\(?P<cc>[ntr])
    | \\(?P<ident>[^\n\x000-9a-fA-FNuUx])
    | (?<![A-Za-z0-9])[Uu]\+(?P<uplus>[0-9a-fA-F]{4,6})
    | =(?P<qp>[0-9A-F]{2})
    """,
    regex.VERBOSE,
)
_ESCAPE_START = frozenset("&%\\=+")
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def _chr(value: int) -> str | None:
    if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
        return None
    return chr(value)


def _decode_one(m: regex.Match[str]) -> str | None:
    """The decoded text of one escape, or None to leave it as written (a NUL decodes as U+0001, see fold_map)."""
    out = _decode_value(m)
    return out.replace("\x00", "\x01") if out and "\x00" in out else out


def _decode_value(m: regex.Match[str]) -> str | None:
    kind = m.lastgroup
    value = m.group(kind) if kind else None
    if kind is None or value is None:
        return None
    if kind in ("hx", "pu", "ub", "u4", "u8", "xb", "x2", "css", "uplus", "qp"):
        return _chr(int(value, 16))
    if kind == "dec":
        return _chr(int(value))
    if kind == "oct":
        return chr(int(value, 8))
    if kind == "name":
        out = html.unescape("&" + value)
        return None if out == "&" + value else out
    if kind == "pct":
        return _unquote(value)
    if kind == "uname":
        try:
            return unicodedata.lookup(value)
        except KeyError:
            return None
    if kind == "cc":
        return _CONTROL_ESCAPES[value]
    if kind == "ident":
        return value
    return None  # pragma: no cover - every named group is handled above


def _unquote(value: str) -> str:
    raw = bytes.fromhex(value.replace("%", ""))
    return raw.decode("utf-8", "replace")


@dataclass
class _Stage:
    """Where the characters of one step's output came from in its input.

    ``seg_out`` / ``seg_in`` are sorted segment starts: output ``[seg_out[k], seg_out_end[k])`` came from input
    ``[seg_in[k], seg_in_end[k])`` as a whole; between segments characters map one to one.
    """

    seg_out: list[int]
    seg_out_end: list[int]
    seg_in: list[int]
    seg_in_end: list[int]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Input span of output span ``[start, end)`` (``end > start``)."""
        return self._pos(start)[0], self._pos(end - 1)[1]

    def spans(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """:meth:`span` for many spans at once (the hot path on hostile input)."""
        seg_out, seg_out_end, seg_in, seg_in_end = (
            self.seg_out,
            self.seg_out_end,
            self.seg_in,
            self.seg_in_end,
        )
        bis = bisect.bisect_right
        out = []
        for start, end in spans:
            k = bis(seg_out, start) - 1
            if k < 0:
                s = start
            elif start < seg_out_end[k]:
                s = seg_in[k]
            else:
                s = start - seg_out_end[k] + seg_in_end[k]
            last = end - 1
            k = bis(seg_out, last) - 1
            if k < 0:
                e = end
            elif last < seg_out_end[k]:
                e = seg_in_end[k]
            else:
                e = last - seg_out_end[k] + seg_in_end[k] + 1
            out.append((s, max(e, s + 1)))
        return out

    def _pos(self, x: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.seg_out, x) - 1
        if k < 0:
            return x, x + 1
        if x < self.seg_out_end[k]:
            return self.seg_in[k], self.seg_in_end[k]
        shifted = x - self.seg_out_end[k] + self.seg_in_end[k]
        return shifted, shifted + 1


# The same alternation with one capturing group around it: ``split`` then hands back plain text and escapes
# alternately without a Match object per escape (the hot path on hostile input). Every alternative starts
# with a literal character (``%XX`` runs written as one then more, ``U+``/``u+`` as two alternatives with
# their look-behind after the letter), so the standard ``re`` engine skips ordinary text to the next
# ``& % \\ = U u`` instead of trying the alternation at every position; the matches are the same.
_SPLIT_SOURCE = re.sub(r"\(\?P<\w+>", "(?:", _ESCAPE_RE.pattern)
for _old, _new in (
    (r"(?:(?:%[0-9a-fA-F]{2})+)", r"%[0-9a-fA-F]{2}(?:%[0-9a-fA-F]{2})*"),
    (
        r"(?<![A-Za-z0-9])[Uu]\+(?:[0-9a-fA-F]{4,6})",
        r"U(?<![A-Za-z0-9]U)\+(?:[0-9a-fA-F]{4,6}) | u(?<![A-Za-z0-9]u)\+(?:[0-9a-fA-F]{4,6})",
    ),
):
    assert _old in _SPLIT_SOURCE, _old
    _SPLIT_SOURCE = _SPLIT_SOURCE.replace(_old, _new)
_ESCAPE_SPLIT_RE = re.compile("(" + _SPLIT_SOURCE + ")", re.VERBOSE)


class _DecodeTable(dict[str, str]):
    """Escape as written -> its decoded text (itself when it does not decode); filled on first sight, bounded.

    What an escape decodes to depends on its own characters only, so the answer can be remembered.
    """

    def __missing__(self, escape: str) -> str:
        m = _ESCAPE_RE.fullmatch(escape)
        decoded = _decode_one(m) if m else None
        out = escape if decoded is None else decoded
        if len(escape) <= 64:  # a long %XX%XX... run is decoded, not remembered
            if len(self) >= 50_000:
                self.clear()
            self[escape] = out
        return out


_DECODED = _DecodeTable()


def _decode_round(text: str, *, record: bool) -> tuple[str, _Stage | None]:
    parts = _ESCAPE_SPLIT_RE.split(text)
    if len(parts) == 1:
        return text, None
    escapes = parts[1::2]
    decoded = list(map(_DECODED.__getitem__, escapes))
    changed = list(map(operator.ne, decoded, escapes))
    if not any(changed):
        return text, None
    stage = None
    if record:
        starts_in = list(itertools.accumulate(map(len, parts), initial=0))
        parts[1::2] = decoded
        starts_out = list(itertools.accumulate(map(len, parts), initial=0))
        stage = _Stage(
            list(itertools.compress(starts_out[1::2], changed)),
            list(itertools.compress(starts_out[2::2], changed)),
            list(itertools.compress(starts_in[1::2], changed)),
            list(itertools.compress(starts_in[2::2], changed)),
        )
    else:
        parts[1::2] = decoded
    return "".join(parts), stage


def _may_hold_escape(text: str) -> bool:
    return any(c in text for c in _ESCAPE_START)


def decode_escapes(text: str) -> str:
    """Decode every escape form in ``text`` (see the module docstring), repeating until nothing changes.

    Example:
        >>> decode_escapes("&#00000109;&amp;lt;\\\\6d %u006d\\\\N{LATIN SMALL LETTER M}%2F")
        'm<mmm/'
    """
    for _ in range(MAX_DECODE_ROUNDS):
        if not _may_hold_escape(text):
            break
        out, stage = _decode_round(text, record=False)
        if stage is None and out is text:
            break
        text = out
    return text


# ------------------------------------------------------------------------------------------------ bidi overrides

_RLO = "\u202e"
_RLO_RUN_RE = regex.compile("\u202e[^\u202c\u2069\n]*")
_MIRROR = str.maketrans("<>()[]{}‹›«»〈〉⟨⟩＜＞", "><)(][}{›‹»«〉〈⟩⟨＞＜")


def _unreverse(text: str) -> tuple[str, _Stage | None]:
    """Add the displayed readings of right-to-left-override runs next to each run (see module docstring)."""
    if _RLO not in text:
        return text, None
    stage = _Stage([], [], [], [])
    pieces: list[str] = []
    last = 0
    out_len = 0
    for m in _RLO_RUN_RE.finditer(text):
        s, e = m.span()
        run = m.group(0)[1:]
        shown = run[::-1]
        block = f"{run}\x00{shown}\x00{shown.translate(_MIRROR)}"
        pieces.append(text[last:s])
        out_len += s - last
        pieces.append(block)
        stage.seg_out.append(out_len)
        stage.seg_out_end.append(out_len + len(block))
        stage.seg_in.append(s)
        stage.seg_in_end.append(e)
        out_len += len(block)
        last = e
    pieces.append(text[last:])
    return "".join(pieces), stage


# ------------------------------------------------------------------------------------------------ per character

_NEWLINES = frozenset("\n\r\x0b\x0c\x85\u2028\u2029")
_BAR_PROTOTYPES = frozenset("l│|")


def _demark(text: str) -> str:
    return "".join(
        c
        for c in unicodedata.normalize("NFKD", text)
        if not (unicodedata.combining(c) or is_invisible(c)) and unicodedata.category(c) not in ("Mn", "Me")
    )


_LATIN_NAME_RE = regex.compile(r"LATIN (?:SMALL |CAPITAL )?LETTER (?:SMALL CAPITAL )?([A-Z])(?: WITH .*)?")


def _fold_core(ch: str, other_case: bool = True) -> str:
    """Case-folded, mark-free UTS #39 prototype of one character (before separators are decided).

    UTS #39 order first (NFD, prototype), then NFKD, marks dropped, case folded, until stable. Prototypes come
    before case folding (``Β`` GREEK CAPITAL BETA is ``B``, its lower case is not ``b``).
    When that does not reach ASCII, the character's other case is tried (``м`` is the lower case of ``М``,
    whose prototype is ``M``), then its Unicode name (``ᴍ`` is LATIN LETTER SMALL CAPITAL M).
    """
    table = confusables()
    cur = ch
    for _ in range(4):
        mapped = "".join(table.get(c, c) for c in unicodedata.normalize("NFD", cur))
        nxt = _demark(mapped).casefold()
        if nxt == cur:
            break
        cur = nxt
    if cur.isascii() or len(ch) != 1 or not other_case:
        return cur
    for other in (ch.upper(), ch.lower()):
        if other != ch and len(other) == 1:
            alt = _fold_core(other, other_case=False)
            if alt.isascii() and alt.isalpha():
                return alt
    m = _LATIN_NAME_RE.fullmatch(unicodedata.name(ch, ""))
    if m:
        return m.group(1).lower()
    return cur


def _structural_by_name(ch: str) -> str:
    """The structural character a punctuation mark or symbol stands for, read from its Unicode name.

    confusables.txt does not relate every bracket to ASCII (``〈`` LEFT ANGLE BRACKET, ``«``, ``【``,
    ``⦃``); their names do: LEFT/RIGHT + ANGLE (bracket, quotation mark, chevron), SQUARE-like BRACKET, CURLY
    BRACKET, VERTICAL LINE/BAR, SOLIDUS/SLASH, COLON.
    """
    name = unicodedata.name(ch, "")
    if not name or unicodedata.category(ch)[0] not in ("P", "S"):
        return ""
    side = 0 if "LEFT" in name else 1 if "RIGHT" in name else -1
    if "ANGLE" in name or "CHEVRON" in name:
        return "<>"[side] if side >= 0 else ""
    if "CURLY BRACKET" in name:
        return "{}"[side] if side >= 0 else ""
    if "BRACKET" in name and "PARENTHESIS" not in name:
        return "[]"[side] if side >= 0 else ""
    if "VERTICAL LINE" in name or "VERTICAL BAR" in name:
        return "|"
    if "SOLIDUS" in name or "SLASH" in name:
        return "/"
    if "COLON" in name and "TRICOLON" not in name:
        return ":"
    return ""


_CACHE_LIMIT = 200_000  # distinct characters remembered per table; hostile text cannot grow memory past it
_MAX_FOLD = 60  # longest fold of one character (U+FDFA folds to 18); keeps fold lengths in one ASCII byte


@functools.lru_cache(maxsize=_CACHE_LIMIT)
def fold_char(ch: str, spaces: bool = False) -> str:
    """The folded form of one character: "" for invisibles and (unless ``spaces``) separators.

    Example:
        >>> fold_char("Ｍ"), fold_char("\u0456"), fold_char("-"), fold_char("-", spaces=True), fold_char("∣")
        ('m', 'i', '', ' ', '|')
    """
    if ch == "\x00":
        return ch  # the boundary between the readings of a right-to-left-override run
    if ch in _NEWLINES:
        return "\n" if ch != "\r" else ""
    if is_invisible(ch):
        return ""
    if ch.isascii():
        if ch in STRUCTURAL:
            return ch
        if ch == "\\":
            return "/"
        if ch in "IiLl1":
            return "i"
        if ch == "0":
            return "o"
        if ch.isalnum():
            return ch.lower()
        return " " if spaces else ""
    core = _fold_core(ch)
    compat = unicodedata.normalize("NFKC", ch)
    if compat != ch and compat in STRUCTURAL and core not in STRUCTURAL:
        core = compat  # ［ is [ by compatibility, though its UTS #39 prototype is (
    is_letter = unicodedata.category(ch)[0] in ("L", "N")
    if not is_letter and not any(c in STRUCTURAL for c in core):
        core = _structural_by_name(ch) or "".join(_structural_by_name(c) or c for c in core)
    out: list[str] = []
    for c in core:
        if c in STRUCTURAL:
            out.append(c)
        elif c == "\\":
            out.append("/")
        elif c in _BAR_PROTOTYPES and not is_letter:
            out.append("|")
        elif c == "l":
            out.append("i")
        elif c.isalnum():
            out.append(c.lower() if c.isascii() else c)
        elif spaces and (not out or out[-1] != " "):
            out.append(" ")
    return "".join(out).replace("rn", "m")[:_MAX_FOLD]


class _FoldTable(dict[int, str]):
    """``str.translate`` table that folds and remembers each character the first time it is seen."""

    def __init__(self, spaces: bool) -> None:
        super().__init__()
        self.spaces = spaces

    def __missing__(self, cp: int) -> str:
        out = fold_char(chr(cp), self.spaces)
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        self[cp] = out
        return out


_TABLES = {False: _FoldTable(False), True: _FoldTable(True)}


class _LenTable(dict[int, str]):
    """``str.translate`` table: each character -> one ASCII character, ``chr(48 + length of its fold)``."""

    def __init__(self, spaces: bool) -> None:
        super().__init__()
        self.spaces = spaces

    def __missing__(self, cp: int) -> str:
        out = chr(48 + len(fold_char(chr(cp), self.spaces)))
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        self[cp] = out
        return out


_LENS = {False: _LenTable(False), True: _LenTable(True)}
_DIGITS_TO_BYTES = bytes.maketrans(bytes(range(48, 48 + _MAX_FOLD + 1)), bytes(range(_MAX_FOLD + 1)))


def _ascii_tables(spaces: bool) -> tuple[bytes, bytes, bytes]:
    """``bytes.translate`` tables for pure-ASCII text: fold (1 char or deleted) and fold length (0 or 1)."""
    fold_tbl = bytearray(range(256))
    lens_tbl = bytearray(256)
    delete = bytearray()
    for b in range(128):
        out = fold_char(chr(b), spaces)
        if len(out) > 1:  # pragma: no cover - guarded by a test: ASCII folds to at most one character
            raise AssertionError(f"ASCII {chr(b)!r} folds to {out!r}")
        if out:
            fold_tbl[b] = ord(out)
            lens_tbl[b] = 1
        else:
            delete.append(b)
    return bytes(fold_tbl), bytes(lens_tbl), bytes(delete)


_ASCII = {flag: _ascii_tables(flag) for flag in (False, True)}


# Long ASCII runs go through bytes.translate (C speed, no lookups); everything between them, ASCII or not,
# through one str.translate with the cached table. Splitting at every script change instead would cost a
# Python step per word on mixed text.
_LONG_ASCII_RE = regex.compile(r"([\x00-\x7f]{32,})")


def _fold_chars(text: str, spaces: bool) -> str:
    """Per-character fold of ``text`` (see :func:`fold_char`)."""
    fold_tbl, _, delete = _ASCII[spaces]
    if text.isascii():
        return text.encode("ascii").translate(fold_tbl, delete).decode("ascii")
    table = _TABLES[spaces]
    parts = _LONG_ASCII_RE.split(text)
    parts[0::2] = [p.translate(table) for p in parts[0::2]]
    parts[1::2] = [p.encode("ascii").translate(fold_tbl, delete).decode("ascii") for p in parts[1::2]]
    return "".join(parts)


def _fold_lengths(text: str, spaces: bool) -> bytes:
    """The fold length of every character of ``text``, one byte each."""
    lens_tbl = _ASCII[spaces][1]
    if text.isascii():
        return text.encode("ascii").translate(lens_tbl)
    table = _LENS[spaces]
    parts = _LONG_ASCII_RE.split(text)
    out = [p.translate(table).encode("ascii").translate(_DIGITS_TO_BYTES) for p in parts[0::2]]
    ascii_runs = [p.encode("ascii").translate(lens_tbl) for p in parts[1::2]]
    joined: list[bytes] = [b""] * len(parts)
    joined[0::2] = out
    joined[1::2] = ascii_runs
    return b"".join(joined)


@dataclass
class _CharStage:
    """Per-character fold: output position -> input character via cumulative fold lengths (built lazily, with
    numpy: one cumulative sum and one sorted search per batch of positions, no Python step per character)."""

    source: str
    spaces: bool
    _cum: Any = None  # numpy int64 array: cum[i] = fold length of source[: i + 1]

    def _table(self) -> Any:
        if self._cum is None:
            import numpy as np

            lens = np.frombuffer(_fold_lengths(self.source, self.spaces), dtype=np.uint8)
            self._cum = np.cumsum(lens, dtype=np.int64)
        return self._cum

    def span(self, start: int, end: int) -> tuple[int, int]:
        got = self.spans([(start, end)])
        return got[0]

    def spans(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if not spans:
            return []
        import numpy as np

        cum = self._table()
        # bisect_right(cum, x) for each x, all at once
        starts = np.searchsorted(cum, np.fromiter((s for s, _ in spans), np.int64, len(spans)), side="right")
        ends = np.searchsorted(cum, np.fromiter((e - 1 for _, e in spans), np.int64, len(spans)), side="right") + 1
        return list(zip(starts.tolist(), ends.tolist(), strict=True))


# Runs of three or more single letters separated by single spaces: "i g n o r e" -> "ignore".
_SPACED_LETTERS_RE = regex.compile(r"(?<![^\W_])[^\W_](?: [^\W_](?![^\W_])){2,}")
_SPACED_HINT_RE = regex.compile(r" [^\W_] [^\W_]")
_SPACE_RUN_RE = regex.compile(r" {2,}| (?=\n)|(?<=\n) ")


def _regex_stage(text: str, rx: regex.Pattern[str], repl: Callable[[str], str]) -> tuple[str, _Stage | None]:
    pieces: list[str] = []
    stage = _Stage([], [], [], [])
    last = 0
    out_len = 0
    for m in rx.finditer(text):
        s, e = m.span()
        new = repl(m.group(0))
        pieces.append(text[last:s])
        out_len += s - last
        pieces.append(new)
        if new:
            stage.seg_out.append(out_len)
            stage.seg_out_end.append(out_len + len(new))
            stage.seg_in.append(s)
            stage.seg_in_end.append(e)
        else:  # deletion: nothing to point at; the following characters shift
            stage.seg_out.append(out_len)
            stage.seg_out_end.append(out_len)
            stage.seg_in.append(s)
            stage.seg_in_end.append(e)
        out_len += len(new)
        last = e
    if not pieces:
        return text, None
    pieces.append(text[last:])
    return "".join(pieces), stage


# ------------------------------------------------------------------------------------------------ public fold


@dataclass
class Folded:
    """A folded view of ``source`` that can point back into it.

    Example:
        >>> f = fold_map("a &lt;/MEMORY-context&gt; b")
        >>> f.text
        'a</memorycontext>b'
        >>> i = f.text.index("<"); j = f.text.index(">") + 1
        >>> s, e = f.source_span(i, j); "a &lt;/MEMORY-context&gt; b"[s:e]
        '&lt;/MEMORY-context&gt;'
    """

    source: str
    text: str
    _stages: list[_Stage | _CharStage]

    def source_spans(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """:meth:`source_span` for many spans at once (faster on hostile input with many matches)."""
        if any(e <= s for s, e in spans):
            raise ValueError("source_spans needs non-empty spans (end > start)")
        cur = spans
        for stage in reversed(self._stages):
            cur = stage.spans(cur)
        n = len(self.source)
        return [(s, min(e, n)) for s, e in cur]

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        """The span of :attr:`source` that folded into ``text[start:end]`` (``end > start``)."""
        if end <= start:
            raise ValueError("source_span needs a non-empty span (end > start)")
        s, e = start, end
        for stage in reversed(self._stages):
            s_lo, _ = stage.span(s, s + 1)
            _, e_hi = stage.span(e - 1, e)
            s, e = s_lo, max(e_hi, s_lo + 1)
        return s, min(e, len(self.source))


def _unreverse_into(cur: str, stages: list[_Stage | _CharStage]) -> str:
    out, stage = _unreverse(cur)
    if stage is not None:
        stages.append(stage)
    return out


def _decode_all(cur: str, stages: list[_Stage | _CharStage]) -> str:
    """Escape-decoding rounds (at most :data:`MAX_DECODE_ROUNDS`), each round's offsets kept in ``stages``."""
    for _ in range(MAX_DECODE_ROUNDS):
        if not _may_hold_escape(cur):
            break
        out, stage = _decode_round(cur, record=True)
        if stage is None:
            break
        stages.append(stage)
        cur = out
    return cur


def fold_map(text: str, *, spaces: bool = False, collapse: bool = True) -> Folded:
    """Fold ``text`` (see the module docstring) and keep the way back to the original offsets.

    With ``spaces=True`` every separator character becomes one space; ``collapse`` (the default) then merges
    runs of spaces and joins spelled-out letters. ``collapse=False`` keeps one space per separator character,
    so offsets stay cheap on hostile input; patterns then allow ``[ \\n]*`` between letters themselves
    (that is what the fence does).
    """
    stages: list[_Stage | _CharStage] = []
    # U+0000 separates the readings of an override run (below); a NUL in the text itself is a control
    # character like U+0001 (a separator), so it can neither pose as that boundary nor hide a token.
    cur = text.replace("\x00", "\x01") if "\x00" in text else text
    # Override runs are read in display order before decoding (an escape written backwards reads forwards
    # there) and, when decoding produced an override (&#x202e;), after it too.
    cur = _unreverse_into(cur, stages)
    overrides = cur.count(_RLO)
    cur = _decode_all(cur, stages)
    if cur.count(_RLO) > overrides:
        cur = _decode_all(_unreverse_into(cur, stages), stages)
    folded = _fold_chars(cur, spaces)
    stages.append(_CharStage(cur, spaces))
    if spaces and collapse:
        for rx, repl in (
            (_SPACE_RUN_RE, lambda s: " " if s.strip(" ") == "" and "\n" not in s and len(s) > 1 else ""),
            (_SPACED_LETTERS_RE, lambda s: s.replace(" ", "")),
        ):
            out, stage = _regex_stage(folded, rx, repl)
            if stage is not None:
                stages.append(stage)
                folded = out
    return Folded(text, folded, stages)


def fold(text: str, *, spaces: bool = False) -> str:
    """The folded matching view of ``text`` (see the module docstring).

    Example:
        >>> fold("Ignore  P R E V I O U S   instructions", spaces=True)
        'ignore previous instructions'
        >>> fold("<|im_start|>system")
        '<|imstart|>system'
    """
    return fold_map(text, spaces=spaces).text



# ------------------------------------------------------------------------------------------------ plain view


class _PlainTable(dict[int, str]):
    """``str.translate`` table for :func:`plain`, filled on first sight of each character and bounded."""

    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        if ch in _NEWLINES:
            out = "" if ch == "\r" else "\n"
        elif is_invisible(ch):
            out = ""
        else:
            out = unicodedata.normalize("NFKC", ch).casefold()
            if not out.isascii() and unicodedata.name(ch, "").startswith("LATIN"):
                out = _latin(ch) or out
            out = out[:_MAX_FOLD]
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        self[cp] = out
        return out


_PLAIN = _PlainTable({c: chr(c).lower() for c in range(128)})


def _latin(ch: str) -> str:
    """The ASCII letters a letter imitates (its case-folded, mark-free UTS #39 prototype), or "" (none)."""
    core = _fold_core(ch)
    if not (core.isascii() and core.isalpha()):
        return ""
    return "i" if core == "l" and ch.isupper() else core  # UTS #39 keeps I and l apart by case only


# An ASCII letter next to a letter that is not ASCII: the place where a word may mix scripts.
_SCRIPT_MIX_RE = re.compile(r"[a-zA-Z][^\W\d_a-zA-Z]|[^\W\d_a-zA-Z][a-zA-Z]")


_NON_ASCII_RUN_RE = re.compile(r"[^\x00-\x7f]+")


def _script_mixes(text: str) -> Iterator[re.Match[str]]:
    """The matches of ``_SCRIPT_MIX_RE`` in ``text``, in order. Each is two neighbours, one ASCII and one not, so
    it sits on an edge of a run of non-ASCII characters: only those edges are tried (a note in English with a
    few accented names costs one scan for the runs, not a class test at every letter)."""
    if text.isascii():
        return
    free = 0  # where the next match may start (matches do not overlap, as with finditer)
    for run in _NON_ASCII_RUN_RE.finditer(text):
        for pos in (run.start() - 1, run.end() - 1):
            m = _SCRIPT_MIX_RE.match(text, pos) if pos >= free else None
            if m:
                free = m.end()
                yield m


def mixed_words(text: str, limit: int = 10_000) -> list[tuple[int, int]]:
    """Spans of the words of ``text`` (at most ``limit``, each cut at 40 letters either side of the mix) that
    hold an ASCII letter next to a letter that is not ASCII: ``pаypаl`` with a Cyrillic ``а``, and ``café``.

    Example:
        >>> mixed_words("send to pаypаl, not paypal")
        [(8, 14)]
    """
    spans: list[tuple[int, int]] = []
    for m in _script_mixes(text):
        if len(spans) >= limit:
            break
        if spans and m.start() < spans[-1][1]:
            continue
        s, e = m.start(), m.end()
        while s > 0 and text[s - 1].isalpha() and m.start() - s < 40:
            s -= 1
        while e < len(text) and text[e].isalpha() and e - m.end() < 40:
            e += 1
        spans.append((s, e))
    return spans


def _latinize_mixed(text: str) -> str:
    """``text`` with the foreign letters of each mixed word (:func:`mixed_words`) read as the Latin letters they
    imitate. Words wholly in another script stay as they are."""
    pieces, last = [], 0
    for s, e in mixed_words(text):
        pieces += [text[last:s], "".join(c if c.isascii() else _latin(c) or c for c in text[s:e])]
        last = e
    return "".join(pieces) + text[last:] if pieces else text


def plain(text: str, max_len: int | None = None) -> str:
    """The word-matching view of ``text``: what a reader sees, in lower case, punctuation kept.

    Escapes decoded (:func:`decode_escapes`), invisible characters removed, NFKC and case folding; Latin letters
    with marks or in odd forms (``é``, ``ᴀ``) read as the ASCII letter of their UTS #39 prototype (the look-alike
    notion :func:`fold` uses), and so do the foreign letters of a word that mixes scripts (``pаypаl`` with a
    Cyrillic ``а`` reads ``paypal``; a Russian or Greek word stays as it is); runs of single spaced-out letters
    joined (``i g n o r e`` reads ``ignore``). Unlike
    :func:`fold`, ``l``, ``1`` and ``i`` stay apart and punctuation stays, so a plain regular expression
    written in lower case matches it. One translate and one regex pass: linear time. ``max_len`` cuts the view
    there, and the work with it (a text of ligatures that each fold to many letters).

    Example:
        >>> plain("IGNORE all ＰＲＥＶＩＯＵＳ instructions")
        'ignore all previous instructions'
        >>> plain("cat ~/.ѕѕh/id_rsa &amp;&amp; s e n d it")
        'cat ~/.ssh/id_rsa && send it'
    """
    decoded = decode_escapes(text)
    if max_len is None or decoded.isascii():
        out = decoded.translate(_PLAIN)
    else:  # a few characters fold to many (U+FDFA to 18): stop once the view reaches ``max_len``
        parts, size = [], 0
        for i in range(0, len(decoded), 65_536):
            parts.append(decoded[i : i + 65_536].translate(_PLAIN))
            size += len(parts[-1])
            if size >= max_len:
                break
        out = "".join(parts)
    out = out[:max_len] if max_len is not None else out
    out = out if out.isascii() else _latinize_mixed(out)
    if not _SPACED_HINT_RE.search(out):  # every run of spaced-out letters holds " x y"
        return out
    return _SPACED_LETTERS_RE.sub(lambda m: m.group(0).replace(" ", ""), out)

# Read the Unicode data at import, not on first use: a process forked after importing ironmem (a worker pool,
# a pre-forked server) then shares the table instead of parsing it again in every child.
_confusables_table()
