"""Key custody: with ``keys.custody: hsm`` in the stack config, every KMS key the stack
creates is held in a KMS custom key store (an AWS CloudHSM cluster or an external key
manager), never in AWS KMS's own HSMs (docs/compliance.md, "Key custody").

The rule reads the stack's own configuration (`policies.stackconfig`), as the pack sees
it in ``pulumi preview`` and the review in the plan document's ``config``.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies import stackconfig
from policies.catalogue import stack_rule
from policies.model import ResourceView, StackFindings, StackView
from policies.settings import Settings
from policies.values import Deferred, is_unknown, known

KEY = "aws:kms/key:Key"
EXTERNAL_KEY = "aws:kms/externalKey:ExternalKey"
KEY_STORE = "aws:kms/customKeyStore:CustomKeyStore"
EXTERNAL_STORE_TYPE = "EXTERNAL_KEY_STORE"


def custody() -> str:
    """The stack's key custody (``standard`` when unset or unreadable)."""
    keys = stackconfig.get("keys")
    value = keys.get("custody") if isinstance(keys, Mapping) else None
    return value if isinstance(value, str) else "standard"


def _store_of(stack: StackView, key: ResourceView) -> ResourceView | None:
    """The stack's custom key store the key's ``customKeyStoreId`` comes from, if any."""
    index = stack.by_urn()
    for urn in key.property_dependencies.get("customKeyStoreId", ()):
        dependency = index.get(urn)
        if dependency is not None and dependency.type == KEY_STORE:
            return dependency
    value = key.props.get("customKeyStoreId")
    if isinstance(value, str) and not is_unknown(value):
        for store in stack.of_type(KEY_STORE):
            if store.props.get("id") == value:
                return store
    return None


@stack_rule("aws-kms-key-custody")
def key_custody(stack: StackView, settings: Settings) -> StackFindings:
    if custody() != "hsm":
        return
    for imported in stack.of_type(EXTERNAL_KEY):
        yield (
            imported.urn,
            "key custody is hsm, but this key holds imported key material in AWS KMS, "
            "outside the custom key store",
        )
    deferred = Deferred()
    for key in stack.of_type(KEY):
        with deferred.each():
            store = _store_of(stack, key)
            value = key.props.get("customKeyStoreId")
            if is_unknown(value) and store is None:
                # Computed, but from nothing that is a key store of this stack.
                known(value, "customKeyStoreId")
            if value in (None, ""):
                yield (
                    key.urn,
                    "key custody is hsm, but the key sets no `customKeyStoreId`: it is "
                    "held in AWS KMS's own HSMs",
                )
                continue
            external = (
                store is not None and store.props.get("customKeyStoreType") == EXTERNAL_STORE_TYPE
            )
            if external and key.props.get("xksKeyId") in (None, ""):
                yield (
                    key.urn,
                    "the key is in an external key store but names no `xksKeyId` (the "
                    "external key that encrypts it)",
                )
    deferred.finish()
