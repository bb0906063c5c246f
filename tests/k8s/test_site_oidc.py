"""Who gets in on premises: the API server's OpenID Connect settings are checked as the
API server checks them (and by the platform's own rules), shipped to the site's cluster
as an AuthenticationConfiguration with its flag, and the team's identity-provider group
is bound to the team's namespace."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from modules.k8s.site.oidc import (
    CONFIG_KEY,
    CONFIGMAP_NAME,
    FLAGS_KEY,
    OidcSpec,
    api_version,
    configuration_errors,
    oidc_configmap,
)
from modules.k8s.tenancy.spec import TeamSpec, team_rbac
from modules.validation import InvalidArgsError
from stacks.config import parse_stack_config
from stacks.offline_plan import load_stack_file
from tests.conftest import shipped_plan
from tests.k8s.fixtures import onprem_args
from tests.support.k8s_schema import schema_errors

GOOD = OidcSpec(issuer_url="https://sso.dc1.internal/realms/gpu", client_id="kubernetes")


def _problems(**changes: object) -> dict[str, str]:
    values = {**dataclasses.asdict(GOOD), **changes}
    with pytest.raises(InvalidArgsError) as caught:
        OidcSpec(**values)  # type: ignore[arg-type]
    return {p.field: p.expected for p in caught.value.problems}


def test_the_configuration_is_what_the_api_server_reads() -> None:
    document = GOOD.document("1.32")
    assert document == {
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {"url": GOOD.issuer_url, "audiences": ["kubernetes"]},
                "claimMappings": {
                    "username": {"claim": "sub", "prefix": "oidc:"},
                    "groups": {"claim": "groups", "prefix": "oidc:"},
                },
            }
        ],
    }
    assert configuration_errors(document) == []
    assert GOOD.apiserver_flags() == (
        "--authentication-config=/etc/kubernetes/auth/authentication-config.yaml",
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [("1.31", "v1beta1"), ("1.33", "v1beta1"), ("1.34", "v1")],
)
def test_the_newest_served_version_is_written(version: str, expected: str) -> None:
    assert api_version(version) == f"apiserver.config.k8s.io/{expected}"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://sso.dc1.internal/realms/gpu", "must be https"),
        ("https://user:pw@sso.dc1.internal/realms/gpu", "username or password"),
        ("https://sso.dc1.internal/realms/gpu?x=1", "query"),
        ("https://sso.dc1.internal/realms/gpu#top", "fragment"),
        ("", "Required"),
    ],
)
def test_the_issuer_is_checked_as_the_api_server_checks_it(url: str, why: str) -> None:
    assert why in _problems(issuer_url=url)["issuer_url"]


def test_no_identity_provider_name_can_become_a_system_user_or_group() -> None:
    problems = _problems(username_prefix="", groups_prefix="system:")
    assert set(problems) == {"username_prefix", "groups_prefix"}
    assert "system:masters" in problems["groups_prefix"]


def test_the_upstream_checks_catch_what_a_hand_written_file_gets_wrong() -> None:
    document = GOOD.document("1.33")
    jwt = document["jwt"][0]
    del jwt["claimMappings"]["groups"]["prefix"]
    jwt["issuer"]["audiences"] = ["a", "a"]
    errors = configuration_errors(document)
    assert any("groups.prefix: Required value" in e for e in errors)
    assert any("Duplicate value" in e for e in errors)
    assert any("MatchAny" in e for e in errors)
    bad_ca = {**GOOD.document("1.33")}
    bad_ca["jwt"][0]["issuer"]["certificateAuthority"] = "not a certificate"
    assert any("certificateAuthority" in e for e in configuration_errors(bad_ca))


def test_team_groups_are_plain_names_of_declared_teams() -> None:
    assert "team_groups.nlp" in _problems(team_groups={"nlp": "ml\nnlp"})
    with pytest.raises(InvalidArgsError) as caught:
        base = onprem_args()
        assert base.onprem is not None
        oidc = dataclasses.replace(GOOD, team_groups={"nobody": "ml-nobody"})
        dataclasses.replace(base, onprem=dataclasses.replace(base.onprem, oidc=oidc))
    assert [p.field for p in caught.value.problems] == ["onprem.oidc.team_groups.nobody"]


def test_the_team_group_is_bound_to_the_team_namespace_only() -> None:
    oidc = dataclasses.replace(GOOD, team_groups={"nlp": "ml-nlp"})
    bindings = [m for m in team_rbac(TeamSpec("nlp"), oidc) if m["kind"] == "RoleBinding"]
    for binding in bindings:
        assert binding["metadata"]["namespace"] == "team-nlp"
        assert [s["name"] for s in binding["subjects"]] == ["team:nlp", "oidc:ml-nlp"]
    # A team left out of team_groups is the provider's team-<name> group.
    assert GOOD.team_group("vision") == "oidc:team-vision"


def test_the_configmap_carries_the_configuration_and_its_flag() -> None:
    configmap = oidc_configmap(GOOD, "1.32")
    assert schema_errors([configmap], "1.32") == []
    assert (configmap["metadata"]["namespace"], configmap["metadata"]["name"]) == (
        "kube-system",
        CONFIGMAP_NAME,
    )
    assert yaml.safe_load(configmap["data"][CONFIG_KEY]) == GOOD.document("1.32")
    assert configmap["data"][FLAGS_KEY].strip() == GOOD.apiserver_flags()[0]


def test_the_onprem_stack_ships_its_oidc_configuration() -> None:
    config = parse_stack_config(load_stack_file("onprem-ib")[0])
    assert config.onprem is not None and config.onprem.oidc is not None
    registrations, _ = shipped_plan("onprem-ib")
    (configmap,) = [
        r.inputs
        for r in registrations.values()
        if r.inputs.get("kind") == "ConfigMap" and r.inputs["metadata"]["name"] == CONFIGMAP_NAME
    ]
    shipped = yaml.safe_load(configmap["data"][CONFIG_KEY])
    assert shipped == config.onprem.oidc.document(config.kubernetes_version)
    assert configuration_errors(shipped) == []
    # The AWS stacks sign in through IAM Identity Center (access entries), not OIDC.
    for stack in ("uae-dev", "uae-prod", "smb-cpu"):
        registrations, _ = shipped_plan(stack)
        assert not [
            r
            for r in registrations.values()
            if r.inputs.get("metadata", {}).get("name") == CONFIGMAP_NAME
        ]


def test_a_member_of_a_teams_group_can_edit_its_namespace_and_nothing_else() -> None:
    """Follow a person of the provider's group ``ml-nlp`` through the onprem-ib plan:
    the API server names them ``oidc:<user>`` in group ``oidc:ml-nlp``; only the
    bindings of ``team-nlp`` name that group (the built-in ``edit`` role, the queue
    viewer and the TrainJob editor there), none in ``team-vision`` and none
    cluster-wide."""
    config = parse_stack_config(load_stack_file("onprem-ib")[0])
    assert config.onprem is not None and config.onprem.oidc is not None
    group = config.onprem.oidc.team_group("nlp")
    assert group == "oidc:ml-nlp"
    registrations, _ = shipped_plan("onprem-ib")
    bindings = [
        r.inputs
        for r in registrations.values()
        if r.inputs.get("kind") in ("RoleBinding", "ClusterRoleBinding")
        and any(s.get("name") == group for s in r.inputs.get("subjects", []))
    ]
    assert {
        (b["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"]) for b in bindings
    } == {
        ("RoleBinding", "team-nlp", "edit"),
        ("RoleBinding", "team-nlp", "queue-viewer"),
        ("RoleBinding", "team-nlp", "trainjob-editor"),
    }
    vision = config.onprem.oidc.team_group("vision")
    assert vision == "oidc:ml-vision" and vision != group
