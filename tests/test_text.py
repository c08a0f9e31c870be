"""ironmem.core.text: the one normalization (fold) shared by the fence and the scanner."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironmem.core import text as T
from ironmem.core.text import (
    confusables,
    decode_escapes,
    fold,
    fold_char,
    fold_map,
    skeleton,
    strip_invisibles,
)

# ------------------------------------------------------------------------------------------------ escapes

ESCAPES = {
    "html named": ("&lt;", "<"),
    "html named, no semicolon": ("&lt/", "</"),
    "html decimal": ("&#60;", "<"),
    "html decimal, leading zeros": ("&#00000109;", "m"),
    "html decimal, no semicolon": ("&#0109x", "mx"),
    "html hex": ("&#x3C;", "<"),
    "html hex, leading zeros": ("&#x00003c;", "<"),
    "html double": ("&amp;lt;", "<"),
    "html triple": ("&amp;amp;#60;", "<"),
    "url": ("%3C%2F", "</"),
    "url utf-8": ("%E2%80%8B", "\u200b"),
    "url double": ("%253C", "<"),
    "url %u": ("%u006d", "m"),
    "url %U": ("%U006D", "m"),
    "css with space": ("\\6d emory", "memory"),
    "css six digits": ("\\00006demory", "memory"),
    "css newline": ("\\6d\nemory", "memory"),
    "js \\u": ("\\u003c", "<"),
    "js \\u{}": ("\\u{6d}", "m"),
    "python \\U": ("\\U0000006d", "m"),
    "python \\x": ("\\x3c", "<"),
    "perl \\x{}": ("\\x{3c}", "<"),
    "python \\N": ("\\N{LATIN SMALL LETTER M}", "m"),
    "python \\N short": ("\\N{SOLIDUS}", "/"),
    "octal": ("\\155", "m"),
    "identity": ("\\/", "/"),
    "control": ("\\n\\nHuman:", "\n\nHuman:"),
    "U+ notation": ("U+003C", "<"),
    "quoted-printable": ("=3C/x=3E", "</x>"),
}


@pytest.mark.parametrize(("raw", "decoded"), list(ESCAPES.values()), ids=list(ESCAPES))
def test_every_escape_form_decodes(raw: str, decoded: str) -> None:
    assert decode_escapes(raw) == decoded


@pytest.mark.parametrize(
    "plain",
    ["no escapes here", "100 % sure", "a & b", "C:\\\\", "&zzzq;", "\\N{NOT A CHARACTER NAME}", "&#x110000;"],
)
def test_text_that_is_not_an_escape_is_kept(plain: str) -> None:
    out = decode_escapes(plain)
    assert out == plain or plain == "C:\\\\"  # an escaped backslash is one backslash
    if plain == "C:\\\\":
        assert out == "C:\\"


def test_decoding_rounds_are_bounded() -> None:
    deep = "&" + "amp;" * 50 + "lt;"
    out = decode_escapes(deep)
    assert out.endswith("lt;")  # stopped after MAX_DECODE_ROUNDS, did not loop
    assert out.count("amp;") == 50 - T.MAX_DECODE_ROUNDS


# ------------------------------------------------------------------------------------------------ invisibles


@pytest.mark.parametrize(
    "ch",
    [
        "\u200b",  # zero-width space
        "\u200d",  # zero-width joiner
        "\u00ad",  # soft hyphen
        "\u2060",  # word joiner
        "\ufeff",  # BOM
        "\u2066",  # LRI
        "\u061c",  # Arabic letter mark
        "\u3164",  # Hangul filler
        "\u115f",  # Hangul choseong filler
        "\u1160",  # Hangul jungseong filler
        "\uffa0",  # halfwidth Hangul filler
        "\U000e0041",  # tag latin capital a
        "\U000e0100",  # variation selector 17
        "\ufe0f",  # variation selector 16
        "\u180e",  # Mongolian vowel separator
    ],
)
def test_default_ignorables_are_stripped(ch: str) -> None:
    assert T.is_invisible(ch)
    assert strip_invisibles(f"mem{ch}ory") == "memory"
    assert fold(f"mem{ch}ory") == fold("memory")


def test_visible_characters_are_not_invisible() -> None:
    for ch in "a<あ中 \n\t😀ک":
        assert not T.is_invisible(ch)


# ------------------------------------------------------------------------------------------------ look-alikes


def _single_letter_confusables() -> list[tuple[str, str]]:
    pairs = []
    for src, proto in confusables().items():
        if len(proto) == 1 and proto.isascii() and proto.isalpha() and unicodedata.category(src)[0] in "LN":
            pairs.append((src, proto))
    return pairs


def test_every_letter_lookalike_in_the_unicode_data_folds_like_its_prototype() -> None:
    pairs = _single_letter_confusables()
    assert len(pairs) > 500  # the data is really there
    wrong = [(s, p, fold(s), fold(p)) for s, p in pairs if fold(s) != fold(p)]
    assert not wrong, wrong[:20]


@pytest.mark.parametrize(
    ("lookalike", "plain"),
    [
        ("ⲟ", "o"),  # Coptic
        ("ꓟ", "m"),  # Lisu
        ("ø", "o"),
        ("×", "x"),
        ("Ꮇ", "m"),  # Cherokee
        ("ᑭ", "p"),  # Canadian syllabics
        ("ｍ", "m"),  # full width
        ("𝐦", "m"),  # mathematical bold
        ("ᴍ", "m"),  # small capital
        ("е", "e"),  # Cyrillic
        ("ο", "o"),  # Greek
        ("0", "o"),
        ("1", "i"),
        ("I", "i"),
        ("l", "i"),
        ("ı", "i"),
    ],
)
def test_lookalikes_from_any_script_fold_to_the_latin_letter(lookalike: str, plain: str) -> None:
    assert fold(lookalike) == fold(plain)


@pytest.mark.parametrize("colon", ["\ua789", "\u2236", "\u05c3", "\u02d0", "\uff1a", "\ufe55"])
def test_lookalike_colons_fold_to_a_colon(colon: str) -> None:
    assert fold(f"note{colon}") == "note:"


@pytest.mark.parametrize("bar", ["|", "｜", "∣", "│", "￨"])
def test_lookalike_bars_fold_to_a_bar(bar: str) -> None:
    assert fold(f"<{bar}x{bar}>") == "<|x|>"


def test_skeleton_follows_uts39() -> None:
    assert skeleton("раураl") == skeleton("paypal")
    assert skeleton("m") == "rn"  # the standard's own prototype
    assert skeleton("ⲟ") == "o"


# ------------------------------------------------------------------------------------------------ separators


@pytest.mark.parametrize(
    "spelled",
    [
        "memory context",
        "memory\ncontext",
        "m e m o r y - c o n t e x t",
        "memory_context",
        "MEMORY.CONTEXT",
        "memory·context",
    ],
)
def test_separators_between_letters_collapse(spelled: str) -> None:
    assert fold(spelled).replace("\n", "") == fold("memorycontext")


def test_space_mode_keeps_words_and_joins_spelled_out_letters() -> None:
    assert fold("Ignore  ALL   previous", spaces=True) == "ignore aii previous"
    assert fold("i g n o r e previous", spaces=True) == "ignore previous"
    assert fold("a b", spaces=True) == "a b"  # two single letters are just two words


def test_structural_characters_survive() -> None:
    assert fold("< / > [ ] { } | : # * =\n") == "</>[]{}|:#*=\n"


def test_rlo_reversed_text_is_read_in_display_order_too() -> None:
    out = fold("x\u202e>txetnoc-yromem/<")
    assert "</memorycontext>" in out and "\x00" in out


def test_legit_scripts_fold_without_loss_of_letters() -> None:
    assert fold("کتاب\u200cها")  # Persian with ZWNJ keeps its letters
    assert fold("👨\u200d👩\u200d👧") == ""  # emoji are separators in the matching view
    assert fold("爬山") == "爬山"


# ------------------------------------------------------------------------------------------------ offsets


def test_source_span_points_at_the_original_characters() -> None:
    src = "a &lt;/MEMORY-context&gt; b"
    f = fold_map(src)
    i, j = f.text.index("<"), f.text.index(">") + 1
    s, e = f.source_span(i, j)
    assert src[s:e] == "&lt;/MEMORY-context&gt;"


def test_source_span_rejects_an_empty_span() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        fold_map("abc").source_span(1, 1)


def test_ascii_folds_to_at_most_one_character() -> None:
    for b in range(128):
        assert len(fold_char(chr(b))) <= 1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab<>/ -_мｍ\u200b&#;%3C\\x6d ")), max_size=40))
def test_property_every_folded_character_points_into_the_source(src: str) -> None:
    f = fold_map(src)
    for i in range(len(f.text)):
        s, e = f.source_span(i, i + 1)
        assert 0 <= s < e <= len(src)
    if f.text:
        s, e = f.source_span(0, len(f.text))
        assert fold(src[s:e]) == f.text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_property_fold_is_idempotent_on_letters(src: str) -> None:
    once = fold(src)
    assert fold(once) == fold(once)  # deterministic
    assert fold(src) == once


def test_offsets_stay_right_after_characters_that_fold_long() -> None:
    src = "x \ufdfa\ufdfa </memory-context> \u3250 y"  # U+FDFA folds to 15+ letters
    f = fold_map(src, spaces=True, collapse=False)
    i, j = f.text.index("<"), f.text.index(">") + 1
    s, e = f.source_span(i, j)
    assert src[s:e] == "</memory-context>"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_property_spans_point_into_the_source_for_any_text(src: str) -> None:
    f = fold_map(src, spaces=True, collapse=False)
    if f.text:
        spans = f.source_spans([(i, i + 1) for i in range(len(f.text))])
        assert all(0 <= s < e <= len(src) for s, e in spans)
        assert spans == sorted(spans) or "\u202e" in src  # monotone outside right-to-left overrides


_SCRIPTS = list("ab Zé\u00b2_1-аο東Ж\u0301ǅ")


@given(st.text(alphabet=st.sampled_from(_SCRIPTS), max_size=40))
def test_property_script_mixes_are_the_regex_matches(src: str) -> None:
    # mixed_words tries only the edges of non-ASCII runs; it must find what scanning every position finds
    assert [m.span() for m in T._script_mixes(src)] == [m.span() for m in T._SCRIPT_MIX_RE.finditer(src)]


@given(st.text(alphabet=st.sampled_from(list("ab é1_ .\n")), max_size=40))
def test_property_spaced_letters_are_joined_whenever_the_pattern_matches(src: str) -> None:
    # plain() runs the spaced-letters pass only when " x y" occurs: it must never skip a run the pass would join
    joined = T._SPACED_LETTERS_RE.sub(lambda m: m.group(0).replace(" ", ""), src)
    assert T._SPACED_HINT_RE.search(src) or joined == src
