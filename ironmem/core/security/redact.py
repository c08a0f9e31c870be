"""Egress redaction: mask secrets (API keys, tokens, private keys, ``password=...``) in text that leaves.

Example:
    >>> redact_secrets("key sk-ant-api03-abcdefghijklmnopqrstuv and password=hunter22")
    'key [REDACTED] and password=[REDACTED]'
"""

from __future__ import annotations

import re

__all__ = ["redact_secrets"]

_SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY"
            r"(?: BLOCK)?-----"
        ),
    ),
    ("anthropic", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")),
    ("github", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    (
        "aws-secret",
        re.compile(r"(?i)(aws_secret_access_key|aws_secret_key)(\s*[=:]\s*)[\"']?[A-Za-z0-9/+=]{40}[\"']?"),
    ),
    (
        "slack",
        re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/]+"),
    ),
    ("google", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b|\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("stripe", re.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer", re.compile(r"(?i)\b(authorization\s*:\s*bearer\s+)[A-Za-z0-9._~+/=-]{16,}")),
    ("url-credentials", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]{3,}(@)")),
    (
        "assignment",
        re.compile(
            r"(?i)\b([\w.-]*(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?key|auth[_-]?token|"
            r"access[_-]?token|client[_-]?secret|private[_-]?key|token)[\w.-]*\s*[=:]\s*)"
            r"(\"[^\"\n]{4,}\"|'[^'\n]{4,}'|[^\s\"',;]{4,})"
        ),
    ),
]

_REDACTED = "[REDACTED]"


def redact_secrets(text: str) -> str:
    """Mask API keys, tokens, private keys and ``password=...`` style assignments in ``text``.

    Run on everything handed to an external provider, so a secret that reached the conversation does not
    leave the machine.

    Example:
        >>> redact_secrets("key sk-ant-api03-abcdefghijklmnopqrstuv and password=hunter22")
        'key [REDACTED] and password=[REDACTED]'
    """
    out = text or ""
    for name, pattern in _SECRET_PATTERNS:
        if name == "assignment":
            out = pattern.sub(
                lambda m: m.group(1) + (m.group(2) if m.group(2) == _REDACTED else _REDACTED), out
            )
        elif name in ("aws-secret",):
            out = pattern.sub(lambda m: m.group(1) + m.group(2) + _REDACTED, out)
        elif name in ("bearer",):
            out = pattern.sub(lambda m: m.group(1) + _REDACTED, out)
        elif name == "url-credentials":
            out = pattern.sub(lambda m: m.group(1) + _REDACTED + m.group(2), out)
        else:
            out = pattern.sub(_REDACTED, out)
    return out
