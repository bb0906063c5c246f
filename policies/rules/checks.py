"""The checks several rules make, written once: where an endpoint is (AWS and its
region, or a Service of the cluster), which buckets the stack creates, the security
settings every container must have, and a store's retention of its backups.

The rules of Spark jobs, Kubeflow Pipelines, model serving and database backups each
used to read endpoints and buckets their own way, and disagreed; they now ask here.
Where the copies differed, the stricter reading that is still right was kept:

* An AWS host's region is the last region label after its first label (the first is a
  bucket, a database or the service): ``s3.<region>``, ``s3.dualstack.<region>``,
  ``s3-fips.<region>``, ``<bucket>.s3.<region>``, PrivateLink's
  ``<bucket>.vpce-<id>.s3.<region>.vpce``, ``<db>.<id>.<region>.rds``, the legacy
  ``s3-<region>``, and China's ``.amazonaws.com.cn``. A host of AWS's with no region
  label (``s3.amazonaws.com``, ``<bucket>.s3.amazonaws.com``, ``s3-external-1``) is the
  global endpoint, in us-east-1. A bucket named like a region does not make its host
  regional.
* A Service of the cluster is ``<service>.<namespace>.svc`` or
  ``<service>.<namespace>.svc.cluster.local``, both DNS labels. A bare name, or a
  ``<name>.svc``, is not: when no Service has that name the pod's resolver goes on to the
  node's search domains and to public DNS.
* A URI's bucket is the stack's when it is the name (or id) of a bucket the stack
  creates; a bucket's ARN is not a bucket name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from policies.aws import REGION_RE
from policies.k8s import containers
from policies.model import ResourceView, StackView
from policies.rules.stack import BUCKET
from policies.values import dig, is_unknown, known

AWS_DOMAINS = (".amazonaws.com", ".amazonaws.com.cn")
#: What an AWS endpoint with no region in its name reaches.
GLOBAL_REGION = "us-east-1"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


# -- endpoints -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """An endpoint given as a URL or as ``host[:port]``.

    Args:
        scheme: the URL's scheme; ``""`` for a bare host.
        host: the host name, lower case, without the port.
        netloc: ``host[:port]`` as written (lower case), what a configured list names.
    """

    scheme: str
    host: str
    netloc: str


def endpoint(text: str) -> Endpoint:
    """The parts of an endpoint written as a URL or a bare ``host[:port]``."""
    try:
        parts = urlsplit(text if "://" in text else f"//{text}")
        return Endpoint(parts.scheme.lower(), (parts.hostname or "").lower(), parts.netloc.lower())
    except ValueError:  # an unbalanced "[" (IPv6): a host nobody can name
        scheme, _, rest = text.lower().rpartition("://")
        return Endpoint(scheme, rest, rest)


def aws_region(host: str) -> str | None:
    """The region an AWS host names; ``""`` for an AWS host that names none (the global
    endpoint, `GLOBAL_REGION`); None for a host that is not AWS's."""
    name = host.split(":", 1)[0].lower().rstrip(".")
    if not name.endswith(AWS_DOMAINS):
        return None
    labels = name.split(".")
    regions = [label for label in labels[1:] if REGION_RE.match(label)]
    # The legacy dash form: s3-<region>.amazonaws.com, <bucket>.s3-<region>.amazonaws.com.
    regions += [
        label[3:] for label in labels if label.startswith("s3-") and REGION_RE.match(label[3:])
    ]
    return regions[-1] if regions else ""


def aws_endpoint_problem(text: str, allowed_regions: Sequence[str]) -> str | None:
    """Why an AWS endpoint is outside the allowed regions (its global endpoint, or a
    region not allowed); None when it is in one, or is not AWS's."""
    region = aws_region(endpoint(text).host)
    if region == "":
        return f"endpoint {text} is S3's global endpoint ({GLOBAL_REGION})"
    if region is not None and region not in allowed_regions:
        return f"endpoint {text} is S3 in {region}, outside the allowed regions"
    return None


def in_cluster_host(host: str) -> bool:
    """Whether ``host`` (a port may follow) is a Service of the cluster:
    ``<service>.<namespace>.svc`` or ``<service>.<namespace>.svc.cluster.local``."""
    labels = host.split(":", 1)[0].lower().split(".")
    if labels[-2:] == ["cluster", "local"]:
        labels = labels[:-2]
    return (
        len(labels) == 3
        and labels[2] == "svc"
        and all(_DNS_LABEL.match(label) for label in labels[:2])
    )


def site_store_problems(text: str, allowed_stores: Sequence[str]) -> Iterator[str]:
    """Why an object store that is not AWS's is not the site's, reached over TLS: it
    must be a Service of the cluster or a store the pack config allows (``host`` or
    ``host:port`` as written), and https (a bare host is https: S3 clients' default)."""
    parts = endpoint(text)
    if parts.scheme not in ("", "https"):
        yield f"{text} is not HTTPS"
    if not (in_cluster_host(parts.host) or parts.netloc in allowed_stores):
        allowed = ", ".join(allowed_stores) or "none configured"
        yield (
            f"{text} is neither a Service of the cluster nor an allowed object store ({allowed})"
        )


def in_cluster_url(url: str) -> bool:
    """Whether ``url`` is http(s) to a Service of the cluster (`in_cluster_host`)."""
    parts = endpoint(url)
    return parts.scheme in ("http", "https") and in_cluster_host(parts.host)


# -- buckets -------------------------------------------------------------------------------


def stack_buckets(stack: StackView) -> dict[str, ResourceView]:
    """The buckets this stack creates, by the names a URI may use (their known ``bucket``
    and ``id``)."""
    buckets: dict[str, ResourceView] = {}
    for bucket in stack.of_type(BUCKET):
        for key in ("bucket", "id"):
            name = bucket.props.get(key)
            if isinstance(name, str) and name and not is_unknown(name):
                buckets.setdefault(name, bucket)
    return buckets


def uri_bucket(uri: str) -> str:
    """The bucket of an ``s3://`` (``s3a://`` ...) URI; ``""`` when it names none."""
    return re.split(r"[/?#]", uri.partition("://")[2], maxsplit=1)[0]


def not_a_stack_bucket(what: str, bucket: str, buckets: Collection[str]) -> str:
    """The words of a violation: ``what`` names a bucket the stack does not create."""
    names = ", ".join(sorted(buckets))
    return f"{what} is bucket {bucket!r}, not one this stack creates ({names or 'it creates none'})"


# -- pod security --------------------------------------------------------------------------


@dataclass(frozen=True)
class SecuritySetting:
    """A ``securityContext`` setting every container must have.

    Args:
        key: the setting.
        pod_level: whether the pod's ``securityContext`` may set it for its containers
            (the container's own value wins).
        problem: what is wrong with a value (None: it is right), completing
            "container <name> ...".
    """

    key: str
    pod_level: bool
    problem: Callable[[Any], str | None]


def security_problems(resource: ResourceView, settings: Sequence[SecuritySetting]) -> Iterator[str]:
    """Each container's settings that are not right, container by container."""
    for container in containers(resource):
        for setting in settings:
            value = (
                container.security(setting.key)
                if setting.pod_level
                else dig(container.spec, "securityContext", setting.key)
            )
            problem = setting.problem(
                known(value, f"{container.path}.securityContext.{setting.key}")
            )
            if problem:
                yield f"container {container.name} {problem}"


def _seccomp_problem(profile: Any) -> str | None:
    kind = dig(profile, "type")
    if kind in ("RuntimeDefault", "Localhost"):
        return None
    return f"runs with seccomp profile {kind or 'Unconfined'}"


NOT_PRIVILEGED = SecuritySetting(
    "privileged", False, lambda v: "is privileged" if v is True else None
)
# Unset means allowed (the kernel's no_new_privs stays off).
NO_PRIVILEGE_ESCALATION = SecuritySetting(
    "allowPrivilegeEscalation",
    False,
    lambda v: None if v is False else "does not set allowPrivilegeEscalation: false",
)
NON_ROOT = SecuritySetting(
    "runAsNonRoot", True, lambda v: None if v is True else "does not set runAsNonRoot: true"
)
NOT_UID_0 = SecuritySetting("runAsUser", True, lambda v: "runs as UID 0" if v == 0 else None)
READ_ONLY_ROOT = SecuritySetting(
    "readOnlyRootFilesystem",
    False,
    lambda v: None if v is True else "has a writable root file system",
)
SECCOMP = SecuritySetting("seccompProfile", True, _seccomp_problem)


def retention_problem(props: dict[str, Any], key: str, unset: str, off: str) -> str | None:
    """The problem of a store's retention setting ``key`` (days of backups, number of
    snapshots): not set (``unset`` says what follows) or below 1 (``off``)."""
    retention = known(props.get(key), key)
    if retention is None:
        return f"`{key}` is not set{unset}"
    if not isinstance(retention, int | float) or retention < 1:
        return f"`{key}` is {retention}: {off}"
    return None
