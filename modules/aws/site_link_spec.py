"""The private link between an on-premises site and the AWS stack it bursts to:
typed, pure, validated.

A fleet's manager (the on-premises site) must reach its worker's private EKS API
endpoint (docs/fleet.md). The worker's stack file declares how (config key
``siteLink``): a Site-to-Site VPN from the site's VPN device (customer gateway) to a
virtual private gateway on the VPC or to an existing transit gateway, routed by BGP or
by static routes; or an existing Direct Connect gateway associated with a virtual
private gateway on the VPC. Either way the site's networks (``siteCidrs``) may reach
the cluster's API on TCP 443 (a rule on the cluster security group) and nothing else
is opened.

The VPN's tunnels are IKEv2 only, with AES-256-GCM, SHA2-384/512 and elliptic-curve
Diffie-Hellman groups (19, 20, 21): the weak defaults AWS would otherwise accept
(IKEv1, AES-128-CBC, SHA-1, DH group 2) are never offered. The customer gateway device
must be configured with the same (AWS's downloadable device configuration lists them).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from modules.validation import Checker, TextFormat

#: What each tunnel offers (valid values of EC2's VpnTunnelOptionsSpecification; the
#: test reads them from botocore's model). One strong choice per phase is enough for a
#: device that supports it; more would let a downgrade pick the weaker one.
IKE_VERSIONS = ("ikev2",)
ENCRYPTION_ALGORITHMS = ("AES256-GCM-16",)
INTEGRITY_ALGORITHMS = ("SHA2-384", "SHA2-512")
DH_GROUP_NUMBERS = (19, 20, 21)
#: The weak values AWS accepts by default and the policy pack refuses.
WEAK_ENCRYPTION = ("AES128", "AES128-GCM-16")
WEAK_INTEGRITY = ("SHA1",)
WEAK_DH_GROUPS = (2, 5, 14, 15, 16, 17, 18, 22, 23, 24)

#: RFC 1918 private blocks: the site's internal networks.
PRIVATE_BLOCKS = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
#: Addresses a customer gateway reached over the internet cannot have.
NOT_INTERNET = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
    )
)
_TGW = re.compile(r"^tgw-[0-9a-f]{8,17}$")
_TGW_ROUTE_TABLE = re.compile(r"^tgw-rtb-[0-9a-f]{8,17}$")
_GATEWAY_ID = TextFormat(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    "a Direct Connect gateway id such as 5f294f92-bafb-4011-916d-9b0bec736b4e",
)
#: The customer side's ASN: EC2's CreateCustomerGateway BgpAsn (1 to 2,147,483,647).
MAX_CUSTOMER_ASN = 2_147_483_647


def _amazon_asn_ok(asn: int) -> bool:
    """A private ASN AWS accepts for its side (16-bit 64512-65534, 32-bit
    4200000000-4294967294: EC2 CreateVpnGateway's AmazonSideAsn)."""
    return 64512 <= asn <= 65534 or 4_200_000_000 <= asn <= 4_294_967_294


def _ipv4_network(value: str) -> ipaddress.IPv4Network | None:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError:
        return None
    return network if isinstance(network, ipaddress.IPv4Network) else None


@dataclass(frozen=True)
class SiteVpnSpec:
    """A Site-to-Site VPN from the site's VPN device (config ``siteLink.vpn``).

    Args:
        customer_gateway_ip: the public IPv4 address of the site's VPN device (its
            outside interface, static).
        bgp_asn: the site device's BGP ASN (1 to 2147483647; default 65000).
        attach_to: ``vpn-gateway`` (default: a virtual private gateway on this VPC) or
            ``transit-gateway`` (an existing transit gateway the VPC attaches to).
        transit_gateway_id: the transit gateway (``tgw-...``), for ``transit-gateway``.
        transit_gateway_route_table_id: the transit gateway route table the site's
            static routes go in (``tgw-rtb-...``), for ``transit-gateway`` with
            ``static`` routing.
        routing: ``bgp`` (default: routes learned from the site) or ``static`` (the
            site's CIDRs as static routes).
        amazon_side_asn: the virtual private gateway's ASN (a private ASN; default 64512).
        startup_action: ``add`` (default: the site's device starts the tunnels) or
            ``start`` (AWS starts them).
    """

    customer_gateway_ip: str
    bgp_asn: int = 65000
    attach_to: Literal["vpn-gateway", "transit-gateway"] = "vpn-gateway"
    transit_gateway_id: str | None = None
    transit_gateway_route_table_id: str | None = None
    routing: Literal["bgp", "static"] = "bgp"
    amazon_side_asn: int = 64512
    startup_action: Literal["add", "start"] = "add"

    def __post_init__(self) -> None:
        check = Checker()
        try:
            address = ipaddress.ip_address(self.customer_gateway_ip)
            internet = isinstance(address, ipaddress.IPv4Address) and not any(
                address in block for block in NOT_INTERNET
            )
        except ValueError:
            internet = False
        check.require(
            internet,
            "customer_gateway_ip",
            self.customer_gateway_ip,
            "the site VPN device's public IPv4 address (not a private, shared, loopback, "
            "link-local, multicast or reserved one)",
        )
        check.require(
            1 <= self.bgp_asn <= MAX_CUSTOMER_ASN,
            "bgp_asn",
            self.bgp_asn,
            f"an ASN from 1 to {MAX_CUSTOMER_ASN}",
        )
        check.require(
            _amazon_asn_ok(self.amazon_side_asn),
            "amazon_side_asn",
            self.amazon_side_asn,
            "a private ASN: 64512-65534 or 4200000000-4294967294",
        )
        check.require(
            self.amazon_side_asn != self.bgp_asn,
            "amazon_side_asn",
            self.amazon_side_asn,
            "differs from bgpAsn (BGP peers need distinct ASNs)",
        )
        transit = self.attach_to == "transit-gateway"
        check.require(
            not transit or bool(_TGW.match(self.transit_gateway_id or "")),
            "transit_gateway_id",
            self.transit_gateway_id,
            "the existing transit gateway's id (tgw-...) for attachTo transit-gateway",
        )
        check.require(
            transit or self.transit_gateway_id is None,
            "transit_gateway_id",
            self.transit_gateway_id,
            "only with attachTo transit-gateway",
        )
        needs_table = transit and self.routing == "static"
        check.require(
            not needs_table
            or bool(_TGW_ROUTE_TABLE.match(self.transit_gateway_route_table_id or "")),
            "transit_gateway_route_table_id",
            self.transit_gateway_route_table_id,
            "the transit gateway route table (tgw-rtb-...) the static routes go in",
        )
        check.require(
            needs_table or self.transit_gateway_route_table_id is None,
            "transit_gateway_route_table_id",
            self.transit_gateway_route_table_id,
            "only with attachTo transit-gateway and routing static",
        )
        check.done()


@dataclass(frozen=True)
class DirectConnectSpec:
    """An existing Direct Connect gateway (config ``siteLink.directConnect``).

    Args:
        gateway_id: the Direct Connect gateway's id (a UUID; the gateway and its
            connection to the site exist already).
        amazon_side_asn: the ASN of the virtual private gateway created on the VPC (a
            private ASN; default 64512).
    """

    gateway_id: str
    amazon_side_asn: int = 64512

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("gateway_id", self.gateway_id, _GATEWAY_ID)
        check.require(
            _amazon_asn_ok(self.amazon_side_asn),
            "amazon_side_asn",
            self.amazon_side_asn,
            "a private ASN: 64512-65534 or 4200000000-4294967294",
        )
        check.done()


@dataclass(frozen=True)
class SiteLinkSpec:
    """How the fleet's on-premises site reaches this stack's VPC (config ``siteLink``).

    Args:
        site_cidrs: the site's networks (RFC 1918 blocks) that reach the cluster's
            private API endpoint; the cluster security group admits exactly these, on
            TCP 443.
        vpn: a Site-to-Site VPN (`SiteVpnSpec`).
        direct_connect: an existing Direct Connect gateway (`DirectConnectSpec`).
    """

    site_cidrs: tuple[str, ...]
    vpn: SiteVpnSpec | None = None
    direct_connect: DirectConnectSpec | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            (self.vpn is None) != (self.direct_connect is None),
            "vpn",
            None,
            "declare exactly one of vpn and directConnect",
        )
        check.require(bool(self.site_cidrs), "site_cidrs", [], "list the site's networks")
        networks: list[tuple[int, ipaddress.IPv4Network]] = []
        for i, cidr in enumerate(self.site_cidrs):
            network = _ipv4_network(cidr)
            private = network is not None and any(network.subnet_of(b) for b in PRIVATE_BLOCKS)
            check.require(
                private,
                f"site_cidrs[{i}]",
                cidr,
                "an RFC 1918 IPv4 block such as 10.20.0.0/16 (the site's own networks)",
            )
            if network is not None and private:
                for j, other in networks:
                    check.require(
                        not network.overlaps(other),
                        f"site_cidrs[{i}]",
                        cidr,
                        f"overlaps siteCidrs[{j}]; list each network once",
                    )
                networks.append((i, network))
        check.done()

    def overlaps(self, cidr: str) -> list[str]:
        """The site CIDRs that overlap ``cidr`` (the VPC's: routing would be ambiguous)."""
        other = _ipv4_network(cidr)
        if other is None:
            return []
        return [
            c for c in self.site_cidrs if (n := _ipv4_network(c)) is not None and n.overlaps(other)
        ]
