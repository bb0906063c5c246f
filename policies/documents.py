"""Policy documents (IAM, KMS key and S3 bucket policies) as the rules read them.

Shared by the encryption, identity and stack rules: the statements of a document given
as a JSON string or a mapping, and the wildcard tests that several rules apply to them.
"""

from __future__ import annotations

from typing import Any

from policies.values import as_list, parse_json_document


def statements(document: Any) -> list[dict[str, Any]]:
    """The statements of an IAM/KMS/S3 policy document (a JSON string or a mapping)."""
    parsed = parse_json_document(document)
    if not isinstance(parsed, dict):
        return []
    found = parsed.get("Statement")
    return [s for s in as_list(found) if isinstance(s, dict)]


def wildcard_principal(principal: Any) -> bool:
    """True for ``"*"`` or ``{"AWS": "*"}`` (any principal of any account)."""
    if principal == "*":
        return True
    if isinstance(principal, dict):
        return any("*" in as_list(value) for value in principal.values())
    return False


def names_everything(value: Any) -> bool:
    """True when an ``Action`` or ``Resource`` value lists ``*`` (or ``*:*``)."""
    return any(item in ("*", "*:*") for item in as_list(value))
