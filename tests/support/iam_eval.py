"""A small evaluator of IAM/SCP policy documents, for tests that must show what a policy
does (deny this action in that region) rather than compare its text.

It implements the parts of AWS's evaluation logic the project's documents use: Effect,
Action/NotAction (with wildcards, case-insensitive), Resource ``*`` or ARN patterns, and
the condition operators String(Not)Equals, String(Not)Like, Arn(Not)Like and Bool, each
with ``IfExists``; several values in a condition are ORed, several keys and operators
ANDed; an explicit deny wins over any allow (AWS IAM User Guide, "Policy evaluation
logic"). Anything else in a document raises, so an unsupported element cannot pass
silently.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

_OPERATORS = {
    "StringEquals": (lambda v, p: v == p, False),
    "StringNotEquals": (lambda v, p: v == p, True),
    "StringLike": (fnmatch.fnmatchcase, False),
    "StringNotLike": (fnmatch.fnmatchcase, True),
    "ArnLike": (fnmatch.fnmatchcase, False),
    "ArnNotLike": (fnmatch.fnmatchcase, True),
    "Bool": (lambda v, p: v.lower() == p.lower(), False),
}


def _list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _action_matches(patterns: Sequence[str], action: str) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in patterns)


def _condition_holds(condition: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    for operator, keys in condition.items():
        base = operator.removesuffix("IfExists")
        if base not in _OPERATORS:
            raise ValueError(f"condition operator {operator} is not supported here")
        test, negated = _OPERATORS[base]
        for key, patterns in keys.items():
            value = context.get(key)
            if value is None:
                if operator.endswith("IfExists"):
                    continue
                # A missing key never matches; a negated operator on it is true in AWS.
                if negated:
                    continue
                return False
            matched = any(test(value, p) for p in _list(patterns))
            if matched == negated:
                return False
    return True


def _applies(
    statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]
) -> bool:
    known = {"Sid", "Effect", "Action", "NotAction", "Resource", "Condition", "Principal"}
    if set(statement) - known:
        raise ValueError(f"statement elements {set(statement) - known} are not supported here")
    if "Action" in statement and not _action_matches(_list(statement["Action"]), action):
        return False
    if "NotAction" in statement and _action_matches(_list(statement["NotAction"]), action):
        return False
    resources = _list(statement.get("Resource", "*"))
    if not any(fnmatch.fnmatchcase(resource, r) for r in resources):
        return False
    return _condition_holds(statement.get("Condition", {}), context)


def decide(
    documents: Sequence[Mapping[str, Any]],
    action: str,
    context: Mapping[str, str],
    resource: str = "*",
) -> str:
    """``"Deny"`` (an explicit deny applies), ``"Allow"`` or ``"ImplicitDeny"``."""
    allowed = False
    for document in documents:
        for statement in _list_of_statements(document):
            if _applies(statement, action, resource, context):
                if statement["Effect"] == "Deny":
                    return "Deny"
                allowed = True
    return "Allow" if allowed else "ImplicitDeny"


def _list_of_statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statements = document["Statement"]
    return statements if isinstance(statements, list) else [statements]


# The AWS-managed SCP every organisation root has by default (allow everything), which
# region-deny SCPs are evaluated together with.
FULL_AWS_ACCESS = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}
