"""Config sections and the platform args: every problem reported at once, by field."""

from __future__ import annotations

import dataclasses
import types
import typing

import kubernetes_validate
import pytest

from modules.k8s.fabric.spec import InfinibandSpec
from modules.k8s.monitoring.spec import MonitoringSpec
from modules.k8s.queueing.spec import QueueingSpec
from modules.k8s.site.oidc import OidcSpec
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.site.spec import SiteSpec, site_configmap
from modules.k8s.tenancy.spec import TeamSpec
from modules.k8s.versions import (
    CLUSTER_AUTOSCALER_IMAGE_TAGS,
    SUPPORTED_KUBERNETES_VERSIONS,
    charts,
)
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError
from tests.k8s.fixtures import G6, SYSTEM, eks_args, onprem_args

CONFIG_SECTIONS = (
    TeamSpec,
    MonitoringSpec,
    QueueingSpec,
    InfinibandSpec,
    OnPremSpec,
    OidcSpec,
    SiteSpec,
)
SIMPLE = (str, int, float, bool)


def _simple(tp: object) -> bool:
    """Scalars, literals, tuples and string maps of them, and an optional section that is
    itself one of `CONFIG_SECTIONS` (checked on its own)."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return True
    if origin is tuple:
        return all(_simple(a) for a in typing.get_args(tp) if a is not Ellipsis)
    if origin is dict:
        return typing.get_args(tp) == (str, str)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return len(options) == 1 and options[0] in CONFIG_SECTIONS
    return tp in SIMPLE


@pytest.mark.parametrize("section", CONFIG_SECTIONS)
def test_config_sections_have_simple_documented_fields(section: type) -> None:
    hints = typing.get_type_hints(section)
    doc = section.__doc__ or ""
    for field in dataclasses.fields(section):
        assert _simple(hints[field.name]), f"{section.__name__}.{field.name}"
        assert f"{field.name}:" in doc, f"{section.__name__}.{field.name} is not documented"
    assert dataclasses.fields(section) and section.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES_VERSIONS)
def test_every_supported_version_has_a_schema_and_an_autoscaler(version: str) -> None:
    assert f"{version}.0" in kubernetes_validate.utils.all_versions()
    assert CLUSTER_AUTOSCALER_IMAGE_TAGS[version].startswith(f"v{version}.")


def test_charts_are_pinned_to_exact_versions() -> None:
    for name, chart in charts().items():
        assert chart.version and not any(c in chart.version for c in "^~*><"), name
        assert chart.repo.startswith("https://") or chart.chart.startswith("oci://"), name


def test_site_spec() -> None:
    assert site_configmap(SiteSpec("ae-abudhabi-dc1", "on-premises"))["data"] == {
        "site": "ae-abudhabi-dc1",
        "country": "AE",
        "kind": "on-premises",
    }
    eks = site_configmap(SiteSpec("aws-me-central-1", "aws-eks", region="me-central-1"))
    assert eks["data"]["region"] == "me-central-1"
    with pytest.raises(InvalidArgsError) as error:
        SiteSpec("Abu Dhabi", "aws-eks", country="UAE")
    assert {p.field for p in error.value.problems} == {"name", "country", "region"}


SITE_NETWORK = {"api_server_cidrs": ("10.20.0.10/32",), "node_cidrs": ("10.20.0.0/22",)}


def test_on_prem_spec() -> None:
    spec = OnPremSpec(storage_class="ceph-rbd", **SITE_NETWORK)
    assert spec.checkpoint_class == "ceph-rbd"
    with pytest.raises(InvalidArgsError) as error:
        OnPremSpec(
            storage_class="",
            egress_cidrs=("0.0.0.0/0", "nope"),
            api_server_cidrs=("10.20.0.300/32",),
            node_cidrs=("0.0.0.0/0",),
        )
    assert {p.field for p in error.value.problems} == {
        "storage_class",
        "egress_cidrs[0]",
        "egress_cidrs[1]",
        "api_server_cidrs[0]",
        "node_cidrs[0]",
    }


def test_an_on_prem_site_names_its_api_server_and_nodes() -> None:
    """Every platform namespace denies egress by default: without the API server's
    addresses no operator could reach it, so the site must declare them."""
    with pytest.raises(InvalidArgsError) as error:
        OnPremSpec(storage_class="ceph-rbd")
    problems = {p.field: p.expected for p in error.value.problems}
    assert set(problems) == {"api_server_cidrs", "node_cidrs"}
    assert "API server" in problems["api_server_cidrs"]


def test_platform_args_report_every_problem_together() -> None:
    bad_pool = NodePoolProfile(
        "gpu-g6", "gpu", "g6.xlarge", 4, 16, 1, gpu_sharing="time-slicing", gpu_replicas=1
    )
    with pytest.raises(InvalidArgsError) as error:
        dataclasses.replace(
            eks_args(),
            kubernetes_version="1.29",
            pools=(SYSTEM, G6, bad_pool),
            eks=None,
            onprem=OnPremSpec("x", **SITE_NETWORK),
        )
    fields = {p.field for p in error.value.problems}
    assert fields == {"kubernetes_version", "eks", "onprem", "pools", "pools[gpu-g6].gpu_replicas"}


def test_site_kind_must_match_the_cluster_kind() -> None:
    with pytest.raises(InvalidArgsError) as error:
        onprem_args(site=SiteSpec("aws-me-central-1", "aws-eks", region="me-central-1"))
    assert [p.field for p in error.value.problems] == ["site.kind"]


def test_a_system_pool_is_required() -> None:
    with pytest.raises(InvalidArgsError) as error:
        eks_args(pools=(G6,))
    assert [p.field for p in error.value.problems] == ["pools"]
