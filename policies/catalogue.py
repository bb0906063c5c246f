"""The rule catalogue: what each rule requires and why (``policies/catalogue.yaml``).

The catalogue holds one entry per rule id: its description, severity, enforcement,
remediation, controls (ids of `policies.controls`), the resources it applies to and the
pack-config keys it reads. A rule function carries only its id
(``@resource_rule("<id>")`` / ``@stack_rule("<id>")``) and takes the rest from its
entry, so reviewers read the metadata in one file and the rule modules hold the checks.

The file ships in the pack's directory and is read when the pack loads: every entry is
checked then (`load_catalogue`), a function whose id has no entry fails when it is
decorated, and an entry without a function fails once every rule module is imported
(`check_complete`). Each failure is one `CatalogueError` naming the file, the rule id
and what is wrong.
"""

from __future__ import annotations

import functools
import importlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pulumi_policy import EnforcementLevel, Severity

from modules.validation import Checker
from policies import controls
from policies.model import Applies, ResourceCheck, Rule, StackCheck, TypesIn
from policies.settings import CONFIG_SCHEMAS

CATALOGUE_FILE = Path(__file__).with_name("catalogue.yaml")


def _shown(path: Path) -> str:
    """The catalogue file as messages name it (``policies/catalogue.yaml``)."""
    return f"{path.parent.name}/{path.name}"


_SHOWN = _shown(CATALOGUE_FILE)

#: Control id (the constant's name in policies/controls.py) -> the control's text.
CONTROLS: dict[str, str] = {
    name: text
    for name, text in vars(controls).items()
    if name[:1].isupper() and isinstance(text, str)
}
SEVERITIES = {severity.value: severity for severity in Severity}
#: A rule's default level: blocking, or reported only (pack config may change it).
LEVELS = {level.value: level for level in (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY)}
#: The pack-config keys a rule may read (every rule reads ``exemptions`` anyway).
CONFIG_KEYS = {key: key for key in CONFIG_SCHEMAS if key != "exemptions"}
_REQUIRED = ("description", "severity", "enforcement", "remediation", "controls", "applies_to")
_FIELDS = (*_REQUIRED, "config_keys")
#: Where a predicate named by ``applies_to: {predicate: ...}`` may live.
_PREDICATE_PACKAGE = "policies."


class CatalogueError(ValueError):
    """The catalogue cannot be used: one line naming the file, the rule and the problem."""


@dataclass(frozen=True)
class Entry:
    """One rule's metadata as the catalogue states it (`Rule` has the field meanings).

    Args:
        applies_to: the types the rule judges, or the dotted name of a predicate
            (``policies.k8s.has_pod_spec``), found when the rule is decorated: the
            predicate's module may be the one being imported.
    """

    description: str
    severity: Severity
    enforcement: EnforcementLevel
    remediation: str
    controls: tuple[str, ...]
    applies_to: TypesIn | str
    config_keys: tuple[str, ...] = ()


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key twice in one mapping (a rule id written twice
    would otherwise keep the last entry without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise CatalogueError(
                    f"line {key_node.start_mark.line + 1}: {key!r} is written twice"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_catalogue(path: Path = CATALOGUE_FILE) -> dict[str, Entry]:
    """Every entry of the catalogue file, checked; `CatalogueError` lists each problem."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except (OSError, yaml.YAMLError, CatalogueError) as err:
        problem = " ".join(str(err).split())
        raise CatalogueError(f"{_shown(path)}: cannot be read: {problem}") from None
    if not isinstance(data, dict) or not data:
        raise CatalogueError(f"{_shown(path)}: expected a mapping of rule id to entry")
    checker = Checker()
    entries = {}
    for rule_id, fields in data.items():
        entry = _entry(str(rule_id), fields, checker)
        if entry is not None:
            entries[str(rule_id)] = entry
    if checker.problems:
        raise CatalogueError(
            f"{_shown(path)}: " + "; ".join(p.describe() for p in checker.problems)
        )
    return entries


def _entry(rule_id: str, fields: Any, checker: Checker) -> Entry | None:
    """The entry of ``rule_id``, or None after recording its problems in ``checker``."""
    before = len(checker.problems)
    if not isinstance(fields, dict):
        checker.require(False, rule_id, fields, "a mapping of the rule's fields")
        return None
    missing = [name for name in _REQUIRED if name not in fields]
    for name in missing:
        checker.require(False, f"{rule_id}.{name}", None, "every entry states it")
    unknown = sorted(set(fields) - set(_FIELDS))
    checker.require(not unknown, rule_id, unknown, f"the fields are {', '.join(_FIELDS)}")
    if missing:
        return None
    for name in ("description", "remediation"):
        text = fields[name]
        ok = isinstance(text, str) and text.strip() != ""
        checker.require(ok, f"{rule_id}.{name}", text, "a non-empty text")
    checker.one_of(f"{rule_id}.severity", fields["severity"], list(SEVERITIES))
    checker.one_of(f"{rule_id}.enforcement", fields["enforcement"], list(LEVELS))
    control_ids = _names(
        checker, f"{rule_id}.controls", fields["controls"], CONTROLS, "policies/controls.py"
    )
    config_keys = _names(
        checker,
        f"{rule_id}.config_keys",
        fields.get("config_keys", []),
        CONFIG_KEYS,
        "CONFIG_SCHEMAS of policies/settings.py",
        empty_ok=True,
    )
    applies_to = _applies_to(checker, f"{rule_id}.applies_to", fields["applies_to"])
    if len(checker.problems) > before or applies_to is None:
        return None
    return Entry(
        fields["description"],
        SEVERITIES[fields["severity"]],
        LEVELS[fields["enforcement"]],
        fields["remediation"],
        tuple(CONTROLS[name] for name in control_ids),
        applies_to,
        config_keys,
    )


def _names(
    checker: Checker,
    field: str,
    value: Any,
    known: Mapping[str, str],
    what: str,
    *,
    empty_ok: bool = False,
) -> tuple[str, ...]:
    """``value`` as a list of names of ``known`` (each once), recording each problem;
    ``what`` says where the names are defined."""
    if not isinstance(value, list) or not (value or empty_ok):
        checker.require(False, field, value, f"a{'' if empty_ok else ' non-empty'} list")
        return ()
    for index, name in enumerate(value):
        ok = isinstance(name, str) and name in known
        checker.require(ok, f"{field}[{index}]", name, f"not a name of {what}")
    twice = sorted({str(name) for name in value if value.count(name) > 1})
    checker.require(not twice, field, twice, "each name once")
    return tuple(value)


def _applies_to(checker: Checker, field: str, value: Any) -> TypesIn | str | None:
    """``{types: [<type token>, ...]}`` or ``{predicate: policies.<module>.<function>}``."""
    if isinstance(value, dict) and list(value) == ["types"]:
        types = value["types"]
        ok = isinstance(types, list) and bool(types)
        ok = ok and all(isinstance(kind, str) and kind.count(":") >= 2 for kind in types)
        checker.require(ok, f"{field}.types", types, "a non-empty list of type tokens")
        return TypesIn(frozenset(types)) if ok else None
    if isinstance(value, dict) and list(value) == ["predicate"]:
        name = value["predicate"]
        ok = isinstance(name, str) and name.startswith(_PREDICATE_PACKAGE) and name.count(".") >= 2
        checker.require(ok, f"{field}.predicate", name, "policies.<module>.<function>")
        return name if ok else None
    checker.require(False, field, value, "{types: [...]} or {predicate: policies.<module>.<fn>}")
    return None


@functools.cache
def catalogue() -> dict[str, Entry]:
    """The pack's catalogue, read once."""
    return load_catalogue()


def resource_rule(
    rule_id: str, *, annotation_exceptions: bool = False
) -> Callable[[ResourceCheck], Rule]:
    """Turn a function ``(ResourceView, Settings) -> messages`` into the `Rule` of the
    catalogue entry ``rule_id``.

    Args:
        rule_id: the rule's id in the catalogue.
        annotation_exceptions: whether a Kubernetes object may opt out of the rule
            with the ``policy-exception.gpuplatform.ae/<rule-id>`` annotation.
    """
    return lambda check: _rule(rule_id, "resource", check, annotation_exceptions)


def stack_rule(rule_id: str) -> Callable[[StackCheck], Rule]:
    """Turn a function ``(StackView, Settings) -> (urn, message) pairs`` into the `Rule`
    of the catalogue entry ``rule_id``."""
    return lambda check: _rule(rule_id, "stack", check, False)


def _rule(
    rule_id: str,
    kind: Literal["resource", "stack"],
    check: ResourceCheck | StackCheck,
    annotation_exceptions: bool,
) -> Rule:
    entry = catalogue().get(rule_id)
    if entry is None:
        function = f"{check.__module__}.{getattr(check, '__qualname__', check)}"
        raise CatalogueError(f"{_SHOWN}: no entry for rule {rule_id!r} (the rule of {function})")
    applies_to = entry.applies_to
    return Rule(
        rule_id,
        entry.description,
        entry.severity,
        entry.enforcement,
        entry.remediation,
        entry.controls,
        kind,
        check,
        _predicate(rule_id, applies_to) if isinstance(applies_to, str) else applies_to,
        entry.config_keys,
        annotation_exceptions,
    )


def _predicate(rule_id: str, dotted_name: str) -> Applies:
    """The function ``dotted_name`` (an entry's ``applies_to``), defined before the
    rule's function."""
    module_name, _, name = dotted_name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        found = None
    if not callable(found):
        raise CatalogueError(
            f"{_SHOWN}: {rule_id}.applies_to.predicate: no function {dotted_name} "
            "(defined before the rule's function)"
        )
    predicate: Applies = found
    return predicate


def check_complete(rules: Iterable[Rule], entries: Mapping[str, Entry] | None = None) -> None:
    """Every catalogue entry has exactly one rule function: `CatalogueError` otherwise."""
    entries = catalogue() if entries is None else entries
    ids = Counter(rule.id for rule in rules)
    twice = sorted(rule_id for rule_id, count in ids.items() if count > 1)
    if twice:
        raise CatalogueError(f"{_SHOWN}: more than one rule function for {twice}")
    orphans = [rule_id for rule_id in entries if rule_id not in ids]
    if orphans:
        raise CatalogueError(f"{_SHOWN}: no rule function for the entries {', '.join(orphans)}")
