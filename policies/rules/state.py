"""Where the stack's state and secrets live: what the program found before registering
anything (the ``residency`` output of the root stack, see stacks/state_residency.py).

The program refuses a stack whose backend or secrets provider is outside the UAE; this
rule puts the same facts in front of the pack and the review, so the report shows them
and the verdict counts them. A plan whose root stack shows no ``residency`` output (a
program without it, or an engine that does not show stack outputs in a preview) cannot
be checked here: the rule says so instead of passing.
"""

from __future__ import annotations

from pulumi_policy.proxy import UnknownValueError

from policies.catalogue import stack_rule
from policies.model import StackFindings, StackView
from policies.settings import Settings
from policies.values import UNKNOWN_STRING, dig, is_unknown

STACK_TYPE = "pulumi:pulumi:Stack"
PARTS = (("stateBackend", "state backend"), ("secretsProvider", "secrets provider"))


@stack_rule("uae-state-and-secrets-in-region")
def state_and_secrets_in_region(stack: StackView, settings: Settings) -> StackFindings:
    for root in stack.of_type(STACK_TYPE):
        residency = root.props.get("residency")
        if residency is None or is_unknown(residency):
            # The engine's unknown-string sentinel: "cannot be checked", not a pass.
            raise UnknownValueError(UNKNOWN_STRING, ["residency"])
        for key, label in PARTS:
            url, source, region = (dig(residency, key, f) for f in ("url", "source", "region"))
            if region not in settings.allowed_regions:
                yield (
                    root.urn,
                    f"{label} {url or '(none)'} (from {source or '?'}) is "
                    f"{'in ' + str(region) if region else 'in no UAE region'}",
                )
