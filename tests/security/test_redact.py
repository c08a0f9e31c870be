"""Egress redaction: keys, tokens, private keys and password assignments are masked before text leaves."""

from __future__ import annotations

import pytest

from ironmem.core.security import redact_secrets

SECRETS = {
    "openai": "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "openai-legacy": "sk-abcdefghijklmnopqrstuvwxyz012345",
    "anthropic": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz-0123456789_ABCDEFG",
    "github": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github-fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-123456789012-1234567890123-abcdefghijklmnop",
    "slack-webhook": "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
    "google": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "stripe": "sk_live_51Habcdefghijklmnop1234",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}


@pytest.mark.parametrize("name", list(SECRETS))
def test_redact_known_key_formats(name: str) -> None:
    secret = SECRETS[name]
    out = redact_secrets(f"the {name} key is {secret} ok")
    assert secret not in out and "[REDACTED]" in out and out.startswith("the ") and out.endswith(" ok")


def test_redact_assignments_pem_and_urls() -> None:
    text = (
        "password=hunter22 api_key: 'abcd1234efgh' DB_PASSWORD=\"s3cr3t value\" token = x9y8z7w6\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
        "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345\n"
        "postgres://app:supersecret@db.internal:5432/ledger\n"
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAAbm9uZQ==\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    out = redact_secrets(text)
    for leaked in (
        "hunter22",
        "abcd1234efgh",
        "s3cr3t value",
        "x9y8z7w6",
        "wJalrXUtnFEMI",
        "abcdefghijklmnopqrstuvwxyz012345",
        "supersecret",
        "b3BlbnNzaC1rZXktdjEAAAAA",
    ):
        assert leaked not in out, leaked
    assert "password=[REDACTED]" in out and "postgres://app:[REDACTED]@db.internal:5432/ledger" in out
    assert "-----BEGIN" not in out


def test_redaction_leaves_ordinary_text_alone() -> None:
    text = (
        "User prefers metric units. The password manager is Bitwarden; tokens are counted with tiktoken. "
        "See https://docs.python.org/3/ and sk-learn (scikit-learn). SHA 9f86d081884c7d659a2f."
    )
    assert redact_secrets(text) == text
    assert redact_secrets("") == ""
