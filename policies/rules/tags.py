"""Tags: every taggable AWS resource says who owns it, how its data is classified and
where it must stay, so inventories and cost and residency reports can be built."""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import Severity

from policies import controls
from policies.aws import effective_tags, is_taggable
from policies.model import ResourceView, resource_rule
from policies.settings import Settings
from policies.values import is_unknown, known


@resource_rule(
    id="aws-required-tags",
    description=(
        "Taggable AWS resources carry the required tags (owner, data-classification, "
        "residency), from their own tags or the provider's default tags."
    ),
    severity=Severity.MEDIUM,
    remediation=(
        "Set the tags in the AWS provider's `defaultTags.tags` (preferred: every resource of "
        "the stack inherits them) or on the resource's own `tags`."
    ),
    controls=(controls.ISO_5_9, controls.ISO_5_12, controls.ISO_5_13),
    applies_to=is_taggable,
    config_keys=("requiredTags",),
)
def required_tags(resource: ResourceView, settings: Settings) -> Iterator[str]:
    tags = effective_tags(resource)
    missing = []
    for key in settings.required_tags:
        value = tags.get(key)
        if is_unknown(value):
            known(value, f"tags.{key}")
        if not (isinstance(value, str) and value.strip()):
            missing.append(key)
    if missing:
        yield f"missing or empty tags: {', '.join(missing)}"
