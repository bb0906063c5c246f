"""Where the cluster is: the site declaration every Kubernetes provider must carry.

A ConfigMap ``kube-system/gpuplatform-site`` states the site, its country and kind (and
on EKS the AWS region). The policy pack requires it for every Kubernetes provider and
reports show it, so an on-premises cluster's location is as visible as an AWS region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from modules.k8s.common import Manifest, metadata
from modules.k8s.names import KUBE_SYSTEM, SITE_CONFIGMAP_NAME
from modules.validation import Checker, TextFormat

_SITE_NAME = TextFormat(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "use lowercase letters, digits and dashes, e.g. ae-abudhabi-dc1",
)
# \Z, not $: the whole value, no trailing newline.
_COUNTRY = TextFormat(r"^[A-Z]{2}\Z", "use an ISO 3166-1 alpha-2 code such as AE")
_REGION = TextFormat(
    r"^[a-z]{2}(-[a-z]+)+-\d$",
    "an AWS region such as me-central-1 is required for aws-eks sites",
)


@dataclass(frozen=True)
class SiteSpec:
    """The site a cluster runs in.

    Args:
        name: site name, lowercase letters, digits and dashes, e.g. ``ae-abudhabi-dc1``
            for a data centre or ``aws-me-central-1`` for an AWS region.
        country: ISO 3166-1 alpha-2 country code of the site (default ``AE``).
        kind: ``aws-eks`` or ``on-premises``.
        region: the AWS region (required for ``aws-eks``, empty on premises).
    """

    name: str
    kind: Literal["aws-eks", "on-premises"]
    country: str = "AE"
    region: str = ""

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("name", self.name, _SITE_NAME)
        check.matches("country", self.country, _COUNTRY)
        check.one_of("kind", self.kind, ("aws-eks", "on-premises"))
        if self.kind == "aws-eks":
            check.matches("region", self.region, _REGION)
        else:
            check.require(
                self.region == "", "region", self.region, "on-premises sites have no AWS region"
            )
        check.done()


def site_configmap(site: SiteSpec) -> Manifest:
    """The ``kube-system/gpuplatform-site`` ConfigMap declaring where the cluster is."""
    data = {"site": site.name, "country": site.country, "kind": site.kind}
    if site.region:
        data["region"] = site.region
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(SITE_CONFIGMAP_NAME, KUBE_SYSTEM),
        "data": data,
    }
