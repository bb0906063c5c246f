"""The checks the rules share (`policies.rules.checks`): an AWS host's region, a
Service of the cluster, a URI's bucket. Each row where the rules' own copies read a
value differently says which copy it was and why the shared reading is the right one."""

from __future__ import annotations

import pytest

from policies.rules.checks import (
    aws_endpoint_problem,
    aws_region,
    endpoint,
    in_cluster_host,
    in_cluster_url,
    site_store_problems,
    uri_bucket,
)


@pytest.mark.parametrize(
    ("host", "region"),
    [
        ("s3.me-central-1.amazonaws.com", "me-central-1"),
        ("s3.dualstack.me-central-1.amazonaws.com", "me-central-1"),
        ("s3-fips.us-east-2.amazonaws.com", "us-east-2"),
        ("data.s3.me-central-1.amazonaws.com:443", "me-central-1"),
        # PrivateLink: Spark's copy read it as S3's global endpoint.
        ("bucket.vpce-0a1b2c3d.s3.me-central-1.vpce.amazonaws.com", "me-central-1"),
        ("db.c0ffee.me-central-1.rds.amazonaws.com", "me-central-1"),
        # The legacy dash form (Spark's and pipelines' copies read no region).
        ("s3-us-west-2.amazonaws.com", "us-west-2"),
        # China: pipelines' copy took it for a store that is not AWS's.
        ("s3.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        # The global endpoint, in any spelling.
        ("s3.amazonaws.com", ""),
        ("s3-external-1.amazonaws.com", ""),
        ("bucket.s3.amazonaws.com", ""),
        # A bucket named like a region is not the host's region (the backup rule's copy
        # took the first region label).
        ("me-central-1.s3.amazonaws.com", ""),
        ("me-central-1.s3.eu-west-1.amazonaws.com", "eu-west-1"),
        # Not AWS's.
        ("objects.dc1.internal", None),
        ("s3.me-central-1.amazonaws.com.example.com", None),
    ],
)
def test_the_region_of_an_aws_host(host: str, region: str | None) -> None:
    assert aws_region(host) == region


def test_an_aws_endpoint_outside_the_allowed_regions_is_named() -> None:
    allowed = ("me-central-1",)
    assert aws_endpoint_problem("https://s3.me-central-1.amazonaws.com", allowed) is None
    assert aws_endpoint_problem("objects.dc1.internal:443", allowed) is None
    assert "global endpoint (us-east-1)" in str(aws_endpoint_problem("s3.amazonaws.com", allowed))
    assert "eu-west-1, outside" in str(aws_endpoint_problem("s3.eu-west-1.amazonaws.com", allowed))


@pytest.mark.parametrize(
    ("host", "inside"),
    [
        ("rgw.rook-ceph.svc", True),
        ("kfp-db-rw.kubeflow.svc.cluster.local", True),
        ("rgw.rook-ceph.svc:443", True),
        # Spark's copy took any name ending in .svc, pipelines' database copy a bare
        # name: when no such Service exists the resolver asks outside the cluster.
        ("rgw.svc", False),
        ("mysql", False),
        ("a.b.c.svc", False),
        ("-rgw.rook-ceph.svc", False),
        ("rgw.rook-ceph.svc.example.com", False),
        ("objects.dc1.internal", False),
    ],
)
def test_a_service_of_the_cluster(host: str, inside: bool) -> None:
    assert in_cluster_host(host) is inside


def test_an_in_cluster_url_is_http_or_https_to_a_service() -> None:
    assert in_cluster_url("https://trigger.kubeflow.svc.cluster.local:8443/alerts")
    assert not in_cluster_url("ftp://trigger.kubeflow.svc/alerts")
    assert not in_cluster_url("https://hooks.example.com/kfp")


def test_the_sites_store_is_in_the_cluster_or_allowed_over_tls() -> None:
    assert list(site_store_problems("https://rgw.rook-ceph.svc", ())) == []
    assert list(site_store_problems("objects.dc1.example.ae", ("objects.dc1.example.ae",))) == []
    (http,) = site_store_problems("http://rgw.rook-ceph.svc", ())
    assert "not HTTPS" in http
    (outside,) = site_store_problems("https://objects.example.com", ())
    assert "neither a Service of the cluster nor an allowed object store" in outside


def test_endpoints_and_buckets_are_read_from_what_is_written() -> None:
    assert endpoint("HTTPS://Objects.DC1:443/x").netloc == "objects.dc1:443"
    assert endpoint("objects.dc1:443").scheme == ""
    assert endpoint("https://[broken").host == "[broken"
    assert uri_bucket("s3a://uae-data/teams/a") == "uae-data"
    assert uri_bucket("s3://uae-data?versionId=1") == "uae-data"
    assert uri_bucket("s3://") == ""
