"""Policy documents (IAM, KMS key and S3 bucket policies) as the rules read them.

Shared by the encryption, identity and stack rules: the statements of a document given
as a JSON string or a mapping, and the wildcard tests that several rules apply to them.
A document that is known but cannot be read (not JSON, not an object) raises
`InvalidDocumentError`, which the rules report as a violation: AWS would reject it, and a
rule must never pass what it could not read. A document that is not known yet (the
preview's unknown sentinel) raises `UnknownValueError`, as every other unknown does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from policies.values import SECRET_PLACEHOLDER, UNKNOWN_STRING, as_list, known


class InvalidDocumentError(ValueError):
    """A known policy document that is not a JSON object; the message says so."""


class HiddenSecretError(UnknownValueError):
    """A document the plan file hides as a secret: it cannot be checked from the plan.

    The engine hands policies the secret's value, so this arises only in the offline
    review of a plan whose secrets were not shown.
    """

    def __init__(self, path: str) -> None:
        super().__init__(UNKNOWN_STRING, path.split("."))
        self.message = f"secret value at .{path} is hidden in this plan"


def statements(document: Any, path: str) -> list[dict[str, Any]]:
    """The statements of an IAM/KMS/S3 policy document (a JSON string or a mapping).

    Args:
        document: the property's value; None (not set) has no statements.
        path: the property path, named in the errors.

    Raises:
        UnknownValueError: the document is not known during preview.
        InvalidDocumentError: the document is known but is not a JSON object.
    """
    document = known(document, path)
    if document is None:
        return []
    if document == SECRET_PLACEHOLDER:
        raise HiddenSecretError(path)
    parsed: Any = document
    if isinstance(document, str):
        try:
            parsed = json.loads(document)
        except ValueError as err:
            reason = err.msg if isinstance(err, json.JSONDecodeError) else str(err)
            raise InvalidDocumentError(
                f"`{path}`: policy document is not valid JSON ({reason})"
            ) from err
    if not isinstance(parsed, Mapping):
        raise InvalidDocumentError(f"`{path}`: policy document is not a JSON object")
    return [s for s in as_list(parsed.get("Statement")) if isinstance(s, dict)]


def wildcard_principal(principal: Any) -> bool:
    """True for ``"*"`` or ``{"AWS": "*"}`` (any principal of any account)."""
    if principal == "*":
        return True
    if isinstance(principal, dict):
        return any("*" in as_list(value) for value in principal.values())
    return False


Statement = Mapping[str, Any]


def allows(
    document: Any,
    path: str,
    matches: Callable[[Statement], bool],
    describe: Callable[[int, Statement], str],
) -> Iterator[str]:
    """``describe(index, statement)`` of each Allow statement of ``document`` that
    ``matches``; the reason instead when the document cannot be read."""
    try:
        found = statements(document, path)
    except InvalidDocumentError as invalid:
        yield str(invalid)
        return
    for index, statement in enumerate(found):
        if statement.get("Effect") == "Allow" and matches(statement):
            yield describe(index, statement)


def any_principal(statement: Statement) -> bool:
    """The statement's principal is the wildcard (`wildcard_principal`)."""
    return wildcard_principal(statement.get("Principal"))


def names_everything(value: Any) -> bool:
    """True when an ``Action`` or ``Resource`` value lists ``*`` (or ``*:*``)."""
    return any(item in ("*", "*:*") for item in as_list(value))
