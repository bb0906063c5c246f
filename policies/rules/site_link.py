"""The site link: a Site-to-Site VPN carries the fleet's traffic (the API, job specs,
their data) between the site and the VPC over the internet, so its tunnels must not
accept weak cryptography. AWS's defaults accept IKEv1, AES-128, SHA-1 and
Diffie-Hellman group 2 unless each tunnel lists what it allows."""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import Severity

from policies import controls
from policies.model import ResourceView, resource_rule, types_in
from policies.settings import Settings
from policies.values import as_list, known

VPN_CONNECTION_TYPE = "aws:ec2/vpnConnection:VpnConnection"
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


@resource_rule(
    id="aws-vpn-strong-tunnels",
    description=(
        "Both tunnels of every Site-to-Site VPN connection list their IKE versions and "
        "algorithms, and allow only IKEv2, AES-256, SHA-2 and Diffie-Hellman groups 15-21."
    ),
    severity=Severity.HIGH,
    remediation=(
        "Set tunnel1/tunnel2 IkeVersions [ikev2], Phase1/Phase2 EncryptionAlgorithms "
        "[AES256-GCM-16], IntegrityAlgorithms [SHA2-384, SHA2-512] and DhGroupNumbers "
        "[19, 20, 21] (`modules/aws/site_link.py` does), and configure the site's device "
        "to match."
    ),
    controls=(controls.ISO_8_24, controls.ISO_8_20, controls.PDPL_20_SECURITY),
    applies_to=types_in(VPN_CONNECTION_TYPE),
)
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
