"""Entry of the CrossGuard pack: ``pulumi preview --policy-pack policies``.

The Pulumi CLI runs this file with the pack's directory (``policies/``) as the working
directory and first entry of ``sys.path``; the rules are imported as the package
``policies.rules`` from the repository root, which is put on the path here. Tests and
the offline review import `policies.pack` and the rules, never this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACK_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACK_DIR.parent
# Modules of policies/ must not shadow top-level ones (they are only reachable as
# policies.<name>), so the pack directory leaves the path and the repository enters it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != PACK_DIR]
sys.path.insert(0, str(REPO_ROOT))

import pulumi_policy.policy  # noqa: E402
from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies.catalogue import CatalogueError  # noqa: E402

try:
    from policies.pack import PACK_NAME, ConfigCheckingAnalyzer, all_policies
except CatalogueError as err:
    # The rules take their metadata from policies/catalogue.yaml: a broken catalogue is
    # one line for the engine to show, not a traceback.
    sys.exit(f"policy pack: {err}")

if __name__ == "__main__":
    # PolicyPack builds its gRPC service from this name: serve the one that refuses pack
    # config weakening residency (see ConfigCheckingAnalyzer).
    pulumi_policy.policy._PolicyAnalyzerServicer = ConfigCheckingAnalyzer  # type: ignore[misc]
    PolicyPack(
        name=PACK_NAME,
        policies=all_policies(),
        enforcement_level=EnforcementLevel.MANDATORY,
        description=(
            "UAE data residency and security baseline of the sovereign GPU platform: "
            "regions, cross-border copies, customer-managed keys, exposure, identity, "
            "Kubernetes workloads, tags."
        ),
        provider="aws",
        tags=["uae", "residency", "pdpl", "iso27001", "cis-eks"],
    )
