"""Hybrid fleet: a MultiKueue manager dispatches jobs only to UAE clusters, through
credentials held as secrets.

A manager (``modules/k8s/fleet/``) registers one ``MultiKueueCluster`` per worker,
annotated with the worker's site (``fleet.gpuplatform.ae/site-kind``, ``region``,
``country``), and one ``kueue-system`` Secret holding the worker's kubeconfig. Whatever
Kueue can dispatch to is listed by those objects, so the rule judges each of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.catalogue import stack_rule
from policies.model import ResourceView, StackFindings, StackView
from policies.settings import Settings
from policies.values import SECRET_PLACEHOLDER, SECRET_SIG, SPECIAL_SIG_KEY, dig, known

MULTIKUEUE_CLUSTER_TYPE = "kubernetes:kueue.x-k8s.io/v1beta2:MultiKueueCluster"
MULTIKUEUE_CLUSTER_TYPES = (
    MULTIKUEUE_CLUSTER_TYPE,
    "kubernetes:kueue.x-k8s.io/v1beta1:MultiKueueCluster",
)
SECRET_TYPE = "kubernetes:core/v1:Secret"
KUEUE_NAMESPACE = "kueue-system"
ANNOTATION = "fleet.gpuplatform.ae/"
KUBECONFIG_KEY = "kubeconfig"


STACK_REFERENCE = "pulumi:pulumi:StackReference"


def _is_secret(value: Any) -> bool:
    """A value the engine holds as a secret (masked in a plan file, or wrapped)."""
    if value == SECRET_PLACEHOLDER:
        return True
    return isinstance(value, Mapping) and value.get(SPECIAL_SIG_KEY) == SECRET_SIG


def _from_stack_reference(secret: ResourceView, prop: str) -> bool:
    """The value was computed from another stack's output (a worker stack's secret
    ``multikueueKubeconfig``). Inside ``pulumi preview`` the engine hands policies
    secret values decrypted, so this, not the value, is what shows the kubeconfig was
    never in this program's code or config."""
    return any(STACK_REFERENCE in urn for urn in secret.property_dependencies.get(prop, ()))


def _site_problem(cluster: ResourceView, settings: Settings) -> str | None:
    annotations = dig(cluster.props, "metadata", "annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    name = dig(cluster.props, "metadata", "name") or cluster.name
    kind = known(annotations.get(f"{ANNOTATION}site-kind"), f"{cluster.name}.site-kind")
    country = known(annotations.get(f"{ANNOTATION}country"), f"{cluster.name}.country")
    region = known(annotations.get(f"{ANNOTATION}region"), f"{cluster.name}.region")
    if not kind or not country:
        return (
            f"worker {name} does not declare its site (annotations {ANNOTATION}site-kind and "
            f"{ANNOTATION}country): nothing shows it is a UAE cluster"
        )
    if country not in settings.allowed_countries:
        allowed = ", ".join(settings.allowed_countries)
        return f"worker {name} is in country {country!r}, outside {allowed}"
    if kind == "aws-eks" and region not in settings.allowed_regions:
        allowed = ", ".join(settings.allowed_regions)
        return f"worker {name} is an EKS cluster in {region!r}, outside {allowed}"
    if kind not in ("aws-eks", "on-premises"):
        return f"worker {name} declares site kind {kind!r}, not aws-eks or on-premises"
    return None


@stack_rule("uae-fleet-worker-residency")
def fleet_worker_residency(stack: StackView, settings: Settings) -> StackFindings:
    for cluster in stack.of_type(*MULTIKUEUE_CLUSTER_TYPES):
        problem = _site_problem(cluster, settings)
        if problem:
            yield cluster.urn, problem


@stack_rule("uae-fleet-worker-credentials")
def fleet_worker_credentials(stack: StackView, _settings: Settings) -> StackFindings:
    secrets = {
        str(dig(r.props, "metadata", "name")): r
        for r in stack.of_type(SECRET_TYPE)
        if dig(r.props, "metadata", "namespace") == KUEUE_NAMESPACE
    }
    for cluster in stack.of_type(*MULTIKUEUE_CLUSTER_TYPES):
        source = dig(cluster.props, "spec", "clusterSource", "kubeConfig")
        name = dig(cluster.props, "metadata", "name") or cluster.name
        if not isinstance(source, Mapping):
            if dig(cluster.props, "spec", "clusterSource", "clusterProfileRef") is None:
                yield cluster.urn, f"worker {name} names no kubeconfig source"
            continue
        location_type = source.get("locationType", "Secret")
        if location_type != "Secret":
            yield (
                cluster.urn,
                f"worker {name} reads its kubeconfig from a {location_type} on the controller, "
                "not from a Secret",
            )
            continue
        secret = secrets.get(str(source.get("location")))
        if secret is None:
            yield (
                cluster.urn,
                f"worker {name}'s kubeconfig Secret {KUEUE_NAMESPACE}/{source.get('location')} "
                "is not registered in this stack",
            )
            continue
        prop = "stringData"
        value = dig(secret.props, prop, KUBECONFIG_KEY)
        if value is None:
            prop, value = "data", dig(secret.props, "data", KUBECONFIG_KEY)
        if value is None:
            yield cluster.urn, f"Secret {secret.name} has no {KUBECONFIG_KEY} key"
        elif not (_is_secret(value) or _from_stack_reference(secret, prop)):
            yield (
                cluster.urn,
                f"worker {name}'s kubeconfig in Secret {secret.name} is plain text written "
                "in the program or its config, not a Pulumi secret from the worker stack",
            )
