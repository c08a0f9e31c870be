"""Hidden text: invisible and bidi characters without a legitimate use, Unicode tag characters (and the
message they spell), and look-alike (homoglyph) spellings. One pass over the text: linear time.
"""

from __future__ import annotations

import re
import unicodedata

from .normalize import _FOREIGN_CONFUSABLES, _SENSITIVE_WORDS, _SKELETON_TABLE, Views, finditer_near
from .result import Finding


def _is_emojiish(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x1F000 <= cp <= 0x1FAFF
        or 0x2600 <= cp <= 0x27BF
        or 0x2B00 <= cp <= 0x2BFF
        or cp == 0xFE0F
        or 0x1F3FB <= cp <= 0x1F3FF
        or cp in (0x2640, 0x2642, 0x2695, 0x2696, 0x2708, 0x2764, 0x20E3)
        or unicodedata.category(ch) == "So"
    )


def _is_joining_script(ch: str) -> bool:
    """Scripts where ZWJ/ZWNJ are part of correct spelling (Arabic, Syriac, Indic, SE Asian, ...)."""
    cp = ord(ch)
    return (
        0x0600 <= cp <= 0x08FF
        or 0xFB50 <= cp <= 0xFDFF
        or 0xFE70 <= cp <= 0xFEFF
        or 0x0700 <= cp <= 0x074F
        or 0x0900 <= cp <= 0x0DFF
        or 0x0E00 <= cp <= 0x0FFF
        or 0x1000 <= cp <= 0x109F
        or 0x1780 <= cp <= 0x17FF
        or 0x1800 <= cp <= 0x18AF
        or 0xA8E0 <= cp <= 0xA8FF
        or 0x1B00 <= cp <= 0x1B7F
        or 0x0F00 <= cp <= 0x0FFF
        or 0x10A0 <= cp <= 0x10FF
    )


def _is_spaceless_script(ch: str) -> bool:
    """Scripts that use ZWSP as a word break (Thai, Lao, Khmer, Myanmar, Tibetan, CJK)."""
    cp = ord(ch)
    return (
        0x0E00 <= cp <= 0x0FFF
        or 0x1000 <= cp <= 0x109F
        or 0x1780 <= cp <= 0x17FF
        or 0x3000 <= cp <= 0x9FFF
        or 0xAC00 <= cp <= 0xD7AF
        or 0xF900 <= cp <= 0xFAFF
    )


_RTL_RE = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]")
_HIDDEN_RE = re.compile(
    "[\u200b\u200c\u200d\u2060-\u2064\ufeff\u180e\u202a-\u202e\u2066-\u2069\u3164\uffa0\u115f\u1160\u034f"
    "\u17b4\u17b5\ufe00-\ufe0f\U000e0100-\U000e01ef]"
)
_TAG_RUN_RE = re.compile("[\U000e0000-\U000e007f]+")
# tag characters spell ASCII (U+E0041 is "A"); the ones outside the printable range spell nothing
_TAG_TO_ASCII = {cp: (chr(cp - 0xE0000) if 0xE0020 <= cp <= 0xE007E else None) for cp in range(0xE0000, 0xE0080)}


#: A single one of these outside a word hides nothing: it carries at most a bit and splits no word. Recalled past
#: turns are copied and pasted text, where a stray one is common (an e-mail's trailing zero-width space). One inside
#: a word (``syst<U+2060>emPrompt``) splits it to slip past a filter, so it still counts; bidi controls, which reorder
#: what the reader sees, and variation selectors, which carry a byte each, are not in the set.
_LONE_BREAKS = frozenset("\u200b\u200c\u200d\u2060\ufeff")


def hidden_findings(text: str, *, allow_lone_break: bool = False) -> tuple[list[Finding], str]:
    """Findings for invisible characters used without a legitimate reason, and any tag-hidden text.

    ``allow_lone_break`` (recall time): a text whose only such character is one zero-width space, joiner, non-joiner,
    word joiner or byte-order mark, not between two letters or digits, gets no invisible-text finding."""
    findings: list[Finding] = []
    hidden_chars: list[str] = []
    n = len(text)
    bad_invisible: list[int] = []
    bad_tags: list[int] = []
    n_tags = 0
    has_rtl: bool | None = None  # computed once, on the first bidi embedding (keeps the pass linear)
    for m in _TAG_RUN_RE.finditer(text):
        # A whole run of tag characters at once. Subdivision flags (U+1F3F4, tag letters/digits, CANCEL
        # TAG, at most 8 tags) are legitimate; anything else hides text.
        s, e = m.span()
        run = m.group(0)
        if (
            s > 0
            and text[s - 1] == "\U0001f3f4"
            and e - s <= 8
            and run[-1] == "\U000e007f"
            and all(0xE0030 <= ord(c) <= 0xE0039 or 0xE0061 <= ord(c) <= 0xE007A for c in run[:-1])
        ):
            continue
        bad_tags.extend((s, e - 1))
        n_tags += e - s
        hidden_chars.append(run.translate(_TAG_TO_ASCII))
    for m in _HIDDEN_RE.finditer(text):
        i = m.start()
        ch = text[i]
        cp = ord(ch)
        prev = text[i - 1] if i > 0 else ""
        nxt = text[i + 1] if i + 1 < n else ""
        if cp == 0x200D:  # ZWJ: emoji sequences and joining scripts
            if (
                (prev and nxt and _is_emojiish(prev) and _is_emojiish(nxt))
                or (prev and _is_joining_script(prev))
                or (nxt and _is_joining_script(nxt))
            ):
                continue
        elif cp == 0x200C:  # ZWNJ: Persian, Arabic, Indic
            if (prev and _is_joining_script(prev)) or (nxt and _is_joining_script(nxt)):
                continue
        elif cp == 0x200B:  # ZWSP: word break in Thai, Khmer, CJK ...
            if (prev and _is_spaceless_script(prev)) or (nxt and _is_spaceless_script(nxt)):
                continue
        elif cp == 0xFEFF and i == 0:
            continue  # byte-order mark
        elif 0xFE00 <= cp <= 0xFE0F:
            if (
                cp in (0xFE0E, 0xFE0F)
                and prev
                and not (0xFE00 <= ord(prev) <= 0xFE0F)
                and (_is_emojiish(prev) or prev in "0123456789#*" or not prev.isascii())
            ):
                continue
            if prev and 0x3400 <= ord(prev) <= 0x9FFF:
                continue
        elif 0xE0100 <= cp <= 0xE01EF:
            if prev and 0x3400 <= ord(prev) <= 0x2FFFF and not (0xE0100 <= ord(nxt or " ") <= 0xE01EF):
                continue
        elif cp in (0x202A, 0x202B, 0x202C, 0x2066, 0x2067, 0x2068, 0x2069):
            if has_rtl is None:
                has_rtl = _RTL_RE.search(text) is not None
            if has_rtl:
                continue  # embeddings and isolates belong in right-to-left text
        elif cp in (0x3164, 0xFFA0, 0x115F, 0x1160) and (
            (prev and 0x1100 <= ord(prev) <= 0x11FF) or (nxt and 0x1100 <= ord(nxt) <= 0x11FF)
        ):
            continue  # Hangul fillers inside a jamo sequence
        bad_invisible.append(i)
    if allow_lone_break and len(bad_invisible) == 1:
        i = bad_invisible[0]
        inside_word = 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        if text[i] in _LONE_BREAKS and not inside_word:
            bad_invisible.clear()
    if bad_invisible:
        i = bad_invisible[0]
        findings.append(
            Finding(
                "invisible_text",
                f"invisible.U+{ord(text[i]):04X}",
                (i, i + 1),
                f"{len(bad_invisible)} invisible/bidi character(s), first U+{ord(text[i]):04X}",
            )
        )
    if bad_tags:
        i = bad_tags[0]
        findings.append(
            Finding(
                "unicode_tags",
                "unicode-tag",
                (i, bad_tags[-1] + 1),
                f"{n_tags} tag character(s): {''.join(hidden_chars)[:60]!r}",
            )
        )
    return findings, "".join(hidden_chars)


# Latin letter next to a letter of another script, inside one word: a candidate look-alike spelling.
_MIXED_RE = re.compile(r"[a-zA-Z][^\W\d_a-zA-Z\u00c0-\u024f]|[^\W\d_a-zA-Z\u00c0-\u024f][a-zA-Z]")
_FOREIGN_LETTER_RE = re.compile(r"[^\W\d_a-zA-Z\u00c0-\u024f]")  # (every match of _MIXED_RE has one, first or second)
_MAX_CANDIDATES = 200


def _uts39_mixed(dec: str, limit: int = 1) -> list[Finding]:
    """Up to ``limit`` mixed-script words whose UTS #39 skeleton (``ironmem.core.text``) is plain ASCII: every
    foreign letter in them imitates a Latin one. Catches look-alikes from any script, not only the fast table's."""
    from ironmem.core.text import skeleton

    found: list[Finding] = []
    seen = 0
    n = len(dec)
    for m in finditer_near(_MIXED_RE, _FOREIGN_LETTER_RE, dec):
        seen += 1
        if seen > _MAX_CANDIDATES:
            break
        s, e = m.start(), m.end()
        while s > 0 and dec[s - 1].isalpha() and m.start() - s < 40:
            s -= 1
        while e < n and dec[e].isalpha() and e - m.end() < 40:
            e += 1
        if found and found[-1].span[1] > s:  # another foreign letter of the word already found
            continue
        word = dec[s:e]
        sk = skeleton(word)
        if sk != word and sk.isascii() and sk.isalpha():
            found.append(Finding("homoglyph", "mixed-script-word", (s, e), word))
            if len(found) >= limit:
                break
    return found


def lookalike_is_sensitive(word: str) -> bool:
    """Whether a look-alike spelling disguises one of the words attacks are made of (``_SENSITIVE_WORDS``)."""
    from ironmem.core.text import skeleton

    return skeleton(word).casefold() in _SENSITIVE_WORDS


def homoglyph_findings(v: Views, limit: int = 1) -> list[Finding]:
    """Look-alike spellings: up to ``limit`` mixed-script words (UTS #39 first, then the fast table's), or one word
    spelled wholly in look-alikes whose skeleton is a sensitive word ("ѕуѕtem")."""
    found = _uts39_mixed(v.dec, limit) if not v.dec.isascii() else []
    if len(found) >= limit:
        return found
    for s, e in v.confusable_spans:
        w = v.dec[s:e]
        foreign = any(c in _FOREIGN_CONFUSABLES for c in w)
        latin = any("a" <= c <= "z" or "A" <= c <= "Z" for c in w)
        if foreign and latin:
            if not any(a < e and s < b for a, b in (f.span for f in found)):  # a word not found yet (spans overlap)
                found.append(Finding("homoglyph", "mixed-script-word", (s, e), w))
            if len(found) >= limit:
                return found
            continue
        sk = w.translate(_SKELETON_TABLE).casefold()
        if sk.isascii() and sk in _SENSITIVE_WORDS:
            return [Finding("homoglyph", "confusable-word", (s, e), w)]
    return found

