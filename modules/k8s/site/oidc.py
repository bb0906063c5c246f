"""How people sign in to an on-premises site's API server: OpenID Connect, checked.

An EKS cluster maps IAM Identity Center groups to access entries
(`modules.aws.identity_spec`); an on-premises site's kube-apiserver trusts the site's
identity provider directly. The stack file declares that trust (``onprem.oidc``); the
platform validates it, renders it as the API server's structured authentication
configuration (``AuthenticationConfiguration``, one JWT authenticator) and ships it,
with the one kube-apiserver flag that reads it, to the site's cluster (a ConfigMap in
``kube-system``, `oidc_configmap`); the control-plane nodes' copy is made from there
(docs/kubernetes.md, "Who gets in on premises"). Each team's identity-provider group,
prefixed, is bound to the team's namespace by the tenancy layer's RoleBindings.

Versions: ``apiserver.config.k8s.io/v1beta1`` from Kubernetes 1.30 (beta, on by
default) and ``v1`` from 1.34 (GA); the platform writes the newest the cluster serves.

Validation is in two parts:

* the API server's own checks of an ``AuthenticationConfiguration``, ported from
  Kubernetes' ``staging/src/k8s.io/apiserver/pkg/apis/apiserver/validation/
  validation.go`` (read as vendored in everettraven/oidc-external-sources-webhook,
  from kubernetes commit d71e7e785957ac21df985def14643a818f5d430f): an issuer URL that
  is https without user, query or fragment; at least one audience, none empty or
  repeated; a claim for the username; a prefix wherever a claim is mapped; a
  certificate authority that parses (`configuration_errors`);
* the platform's: both prefixes are set and outside ``system:`` (an identity
  provider's group named ``system:masters`` must never become that Kubernetes group),
  and each team's group is a plain name.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from cryptography import x509

from modules.k8s.common import APISERVER_FLAGS_KEY, Manifest, control_plane_file
from modules.validation import Checker

#: The file the kube-apiserver reads (``--authentication-config``) on each
#: control-plane node.
DEFAULT_CONFIG_PATH = "/etc/kubernetes/auth/authentication-config.yaml"
CONFIGMAP_NAME = "gpuplatform-authentication-config"
CONFIG_KEY = "authentication-config.yaml"
FLAGS_KEY = APISERVER_FLAGS_KEY
#: The configuration's digest: a control-plane node's copy is current when it matches.
DIGEST_ANNOTATION = "gpuplatform.ae/authentication-config-sha256"
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/ -]{0,253}$")
_CLAIM = re.compile(r"^[A-Za-z0-9_.:/-]{1,256}$")


def api_version(kubernetes_version: str) -> str:
    """The newest ``AuthenticationConfiguration`` version a cluster serves."""
    major, minor = (int(p) for p in kubernetes_version.split(".")[:2])
    return (
        "apiserver.config.k8s.io/v1"
        if (major, minor) >= (1, 34)
        else ("apiserver.config.k8s.io/v1beta1")
    )


def _url_errors(url: str, path: str) -> list[str]:
    if not url:
        return [f"{path}: Required value"]
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as err:
        return [f"{path}: Invalid value {url!r}: {err}"]
    errors = []
    if parts.scheme != "https":
        errors.append(f"{path}: Invalid value {url!r}: URL scheme must be https")
    if parts.username is not None or parts.password is not None:
        errors.append(f"{path}: Invalid value {url!r}: URL must not contain a username or password")
    if parts.query:
        errors.append(f"{path}: Invalid value {url!r}: URL must not contain a query")
    if parts.fragment:
        errors.append(f"{path}: Invalid value {url!r}: URL must not contain a fragment")
    return errors


def _mapping_errors(mapping: Mapping[str, Any], path: str, required: bool) -> list[str]:
    claim, expression = mapping.get("claim", ""), mapping.get("expression", "")
    if claim and expression:
        return [f"{path}: Invalid value: claim and expression can't both be set"]
    if not claim and not expression and required:
        return [f"{path}.claim: Required value: claim name is required"]
    if not claim and not expression and "prefix" in mapping:
        return [
            f"{path}.claim: Required value: non-empty claim name is required when prefix is set"
        ]
    if claim and "prefix" not in mapping:
        return [
            f"{path}.prefix: Required value: prefix is required when claim is set. It can be "
            "set to an empty string to disable prefixing"
        ]
    return []


def configuration_errors(document: Mapping[str, Any]) -> list[str]:
    """The API server's validation of an ``AuthenticationConfiguration`` (JWT part, no
    CEL), one message per problem, each naming its field path."""
    errors = []
    if not str(document.get("apiVersion", "")).startswith("apiserver.config.k8s.io/") or (
        document.get("kind") != "AuthenticationConfiguration"
    ):
        errors.append(
            "apiVersion/kind: expected apiserver.config.k8s.io AuthenticationConfiguration"
        )
    authenticators = document.get("jwt") or []
    if len(authenticators) > 64:
        errors.append(f"jwt: Too many: {len(authenticators)}: must have at most 64 items")
    seen: set[str] = set()
    for i, jwt in enumerate(authenticators):
        path = f"jwt[{i}]"
        issuer = jwt.get("issuer") or {}
        url = issuer.get("url", "")
        errors += _url_errors(url, f"{path}.issuer.url")
        if url in seen:
            errors.append(f"{path}.issuer.url: Duplicate value: {url!r}")
        seen.add(url)
        audiences = issuer.get("audiences") or []
        if not audiences:
            errors.append(f"{path}.issuer.audiences: Required value: at least one audience")
        for j, audience in enumerate(audiences):
            if not audience:
                errors.append(f"{path}.issuer.audiences[{j}]: Required value")
            if audience in audiences[:j]:
                errors.append(f"{path}.issuer.audiences[{j}]: Duplicate value: {audience!r}")
        policy = issuer.get("audienceMatchPolicy", "")
        if len(audiences) > 1 and policy != "MatchAny":
            errors.append(
                f"{path}.issuer.audienceMatchPolicy: Invalid value {policy!r}: "
                "audienceMatchPolicy must be MatchAny for multiple audiences"
            )
        authority = issuer.get("certificateAuthority", "")
        if authority:
            try:
                x509.load_pem_x509_certificates(authority.encode())
            except ValueError as err:
                errors.append(f"{path}.issuer.certificateAuthority: Invalid value: {err}")
        mappings = jwt.get("claimMappings") or {}
        errors += _mapping_errors(
            mappings.get("username") or {}, f"{path}.claimMappings.username", True
        )
        errors += _mapping_errors(
            mappings.get("groups") or {}, f"{path}.claimMappings.groups", False
        )
    return errors


@dataclass(frozen=True)
class OidcSpec:
    """The site API server's OpenID Connect settings (config key ``onprem.oidc``).

    Args:
        issuer_url: the identity provider's issuer (``https://``; the API server
            fetches ``/.well-known/openid-configuration`` and the signing keys there).
        client_id: the client the tokens are issued for (their ``aud``).
        username_claim: the token claim that names the user (default ``sub``; ``email``
            makes the API server require ``email_verified``).
        username_prefix: put before every user name (default ``oidc:``), so no identity
            provider user can take the name of a Kubernetes or service-account user.
        groups_claim: the token claim listing the user's groups (default ``groups``).
        groups_prefix: put before every group (default ``oidc:``), so no identity
            provider group can become a Kubernetes group such as ``system:masters``.
        team_groups: team name -> the identity provider's group of its members (default
            for a team left out: ``team-<name>``). The team's RoleBindings bind
            ``<groupsPrefix><group>``.
        certificate_authority: PEM of the CA that signed the issuer's certificate, where
            the nodes' trust store does not hold it (default none).
        config_path: where the control-plane nodes keep the configuration file (the
            ``--authentication-config`` flag; default
            ``/etc/kubernetes/auth/authentication-config.yaml``).
    """

    issuer_url: str
    client_id: str
    username_claim: str = "sub"
    username_prefix: str = "oidc:"
    groups_claim: str = "groups"
    groups_prefix: str = "oidc:"
    team_groups: dict[str, str] = field(default_factory=dict)
    certificate_authority: str = ""
    config_path: str = DEFAULT_CONFIG_PATH

    def __post_init__(self) -> None:
        check = Checker()
        for message in configuration_errors(self.document("1.33")):
            where, _, problem = message.partition(": ")
            attribute = _ATTRIBUTES.get(where.removeprefix("jwt[0]."), where)
            check.require(False, attribute, getattr(self, attribute, None), problem)
        for name in ("username_prefix", "groups_prefix"):
            value = getattr(self, name)
            check.require(
                bool(value) and not value.startswith("system:"),
                name,
                value,
                "a non-empty prefix outside system: (e.g. oidc:), so that no identity-provider "
                "name can become a Kubernetes user or group such as system:masters",
            )
        for name in ("username_claim", "groups_claim"):
            value = getattr(self, name)
            check.require(bool(_CLAIM.match(value)), name, value, "a JWT claim name")
        for team, group in self.team_groups.items():
            check.require(
                bool(_GROUP.match(group)),
                f"team_groups.{team}",
                group,
                "the identity provider's group name (letters, digits, . _ : @ / - and spaces)",
            )
        check.require(
            self.config_path.startswith("/") and " " not in self.config_path,
            "config_path",
            self.config_path,
            "an absolute path on the control-plane nodes",
        )
        check.done()

    def idp_group(self, team: str) -> str:
        """The identity provider's group of a team's members."""
        return self.team_groups.get(team, f"team-{team}")

    def team_group(self, team: str) -> str:
        """The Kubernetes group a team's members have: the prefixed provider group."""
        return f"{self.groups_prefix}{self.idp_group(team)}"

    def document(self, kubernetes_version: str) -> dict[str, Any]:
        """The ``AuthenticationConfiguration`` the API server reads."""
        issuer: dict[str, Any] = {"url": self.issuer_url, "audiences": [self.client_id]}
        if self.certificate_authority:
            issuer["certificateAuthority"] = self.certificate_authority
        return {
            "apiVersion": api_version(kubernetes_version),
            "kind": "AuthenticationConfiguration",
            "jwt": [
                {
                    "issuer": issuer,
                    "claimMappings": {
                        "username": {"claim": self.username_claim, "prefix": self.username_prefix},
                        "groups": {"claim": self.groups_claim, "prefix": self.groups_prefix},
                    },
                }
            ],
        }

    def apiserver_flags(self) -> tuple[str, ...]:
        """The kube-apiserver flag that reads the configuration (it excludes every
        ``--oidc-*`` flag: the API server refuses both)."""
        return (f"--authentication-config={self.config_path}",)


#: A field path of `configuration_errors` -> the dataclass attribute.
_ATTRIBUTES = {
    "issuer.url": "issuer_url",
    "issuer.audiences": "client_id",
    "issuer.audiences[0]": "client_id",
    "issuer.certificateAuthority": "certificate_authority",
    "claimMappings.username.claim": "username_claim",
    "claimMappings.username.prefix": "username_prefix",
    "claimMappings.groups.claim": "groups_claim",
    "claimMappings.groups.prefix": "groups_prefix",
}


def oidc_configmap(spec: OidcSpec, kubernetes_version: str) -> Manifest:
    """The ConfigMap the control-plane nodes' configuration file is copied from: the
    ``AuthenticationConfiguration`` and the kube-apiserver flag that reads it."""
    text = yaml.safe_dump(spec.document(kubernetes_version), sort_keys=False)
    return control_plane_file(
        CONFIGMAP_NAME, CONFIG_KEY, text, spec.apiserver_flags(), DIGEST_ANNOTATION
    )
