"""Tags: every taggable AWS resource says who owns it, how its data is classified and
where it must stay, so inventories and cost and residency reports can be built."""

from __future__ import annotations

from collections.abc import Iterator

from policies.aws import effective_tags
from policies.catalogue import resource_rule
from policies.model import ResourceView
from policies.settings import Settings
from policies.values import is_unknown, known


@resource_rule("aws-required-tags")
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
