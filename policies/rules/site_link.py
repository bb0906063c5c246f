"""The site link: a Site-to-Site VPN carries the fleet's traffic (the API, job specs,
their data) between the site and the VPC over the internet, so its tunnels must not
accept weak cryptography. AWS's defaults accept IKEv1, AES-128, SHA-1 and
Diffie-Hellman group 2 unless each tunnel lists what it allows."""

from __future__ import annotations

from collections.abc import Iterator

from policies.catalogue import resource_rule
from policies.model import ResourceView
from policies.settings import Settings
from policies.values import as_list, known

#: What a tunnel may offer (EC2 VpnTunnelOptionsSpecification values): IKEv2, 256-bit
#: AES, SHA-2, and Diffie-Hellman groups of 3072 bits and more or elliptic curves.
STRONG = {
    "IkeVersions": frozenset({"ikev2"}),
    "Phase1EncryptionAlgorithms": frozenset({"AES256", "AES256-GCM-16"}),
    "Phase2EncryptionAlgorithms": frozenset({"AES256", "AES256-GCM-16"}),
    "Phase1IntegrityAlgorithms": frozenset({"SHA2-256", "SHA2-384", "SHA2-512"}),
    "Phase2IntegrityAlgorithms": frozenset({"SHA2-256", "SHA2-384", "SHA2-512"}),
    "Phase1DhGroupNumbers": frozenset({15, 16, 17, 18, 19, 20, 21}),
    "Phase2DhGroupNumbers": frozenset({15, 16, 17, 18, 19, 20, 21}),
}


@resource_rule("aws-vpn-strong-tunnels")
def vpn_strong_tunnels(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for tunnel in ("tunnel1", "tunnel2"):
        for option, allowed in STRONG.items():
            key = f"{tunnel}{option}"
            values = as_list(known(resource.props.get(key), key))
            if not values:
                yield f"`{key}` is not set: AWS then also accepts weak defaults"
                continue
            weak = sorted(str(v) for v in values if v not in allowed)
            if weak:
                yield f"`{key}` allows {', '.join(weak)}"
