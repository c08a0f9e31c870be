"""Scanner for memory writes and recall, and secret redaction for egress.

(First cut: the public API is fixed; the rule set grows in the security issue.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Finding", "ScanResult", "scan", "redact_secrets"]


@dataclass(frozen=True)
class Finding:
    """One rule that matched: its category, the rule id and the matched span of the input."""

    category: str
    rule: str
    span: tuple[int, int]
    excerpt: str = ""


@dataclass(frozen=True)
class ScanResult:
    """The verdict on one text. ``blocked`` is True when any finding is severe enough to refuse it."""

    blocked: bool
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def categories(self) -> list[str]:
        seen: list[str] = []
        for f in self.findings:
            if f.category not in seen:
                seen.append(f.category)
        return seen

    @property
    def reason(self) -> str:
        return ", ".join(self.categories)


_RULES: list[tuple[str, str, re.Pattern[str]]] = [
    (
        "instruction_override",
        "ignore-previous",
        re.compile(r"\b(ignore|disregard|forget)\b.{0,30}\b(previous|prior|above|all)\b.{0,20}\b(instructions?|rules|prompts?)\b", re.I | re.S),
    ),
    ("fence_forgery", "fence-tag", re.compile(r"<\s*/?\s*memory[-_ ]?context\s*>", re.I)),
    ("invisible_text", "unicode-tag", re.compile("[\U000e0000-\U000e007f]")),
]

_SECRET_PATTERNS = [
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
]


def scan(text: str) -> ScanResult:
    """Scan ``text`` for prompt injection, exfiltration, hidden text and fence forgery."""
    findings = []
    for category, rule, pattern in _RULES:
        for m in pattern.finditer(text or ""):
            findings.append(Finding(category, rule, m.span(), m.group(0)[:80]))
    return ScanResult(blocked=bool(findings), findings=tuple(findings))


def redact_secrets(text: str) -> str:
    """Mask API keys, tokens and private keys before text leaves for an external provider."""
    out = text or ""
    for pattern in _SECRET_PATTERNS:
        out = pattern.sub("[REDACTED]", out)
    return out
