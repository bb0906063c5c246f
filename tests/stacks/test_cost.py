"""`make cost` and the price snapshot: the estimate is the snapshot's prices times the
pools' hours; the refresh parses the Pricing API's answer (request checked against
botocore's model of the service)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber

from stacks import cost
from stacks.config import parse_stack_config
from stacks.cost import onprem_node_hour, pool_costs
from stacks.offline_plan import load_stack_file
from stacks.pricing import (
    HOURS_PER_MONTH,
    PricingError,
    fetch_prices,
    load_snapshot,
    parse_price_list,
    snapshot_document,
    stack_instance_types,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pricing_get_products.json"


def test_uae_prod_estimate_is_the_snapshot_prices_times_the_hours() -> None:
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    snapshot = load_snapshot()
    costs = pool_costs(config, snapshot)
    expected_min = sum(
        snapshot.instance_types[p.instance_type].usd_per_hour * HOURS_PER_MONTH * p.min_size
        for p in config.node_pools
    )
    expected_max = sum(
        snapshot.instance_types[p.instance_type].usd_per_hour * HOURS_PER_MONTH * p.max_size
        for p in config.node_pools
    )
    assert [c.pool for c in costs] == ["system", "h200", "preprocess"]
    assert sum(c.monthly_min_usd for c in costs) == pytest.approx(expected_min)
    assert sum(c.monthly_max_usd for c in costs) == pytest.approx(expected_max)
    # The p5en pool dominates the range: 4 nodes for a month.
    p5en = snapshot.instance_types["p5en.48xlarge"].usd_per_hour
    assert costs[1].monthly_max_usd == pytest.approx(p5en * 730 * 4)


def test_make_cost_prints_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert cost.main(["uae-prod"]) == 0
    out = capsys.readouterr().out
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    costs = pool_costs(config, load_snapshot())
    total = f"{sum(c.monthly_min_usd for c in costs):,.2f}"
    assert total in out and f"{sum(c.monthly_max_usd for c in costs):,.2f}" in out
    assert "UNVERIFIED" in out  # the shipped snapshot says how it was obtained


def test_onprem_pools_are_priced_per_gpu_cpu_and_gib_hour() -> None:
    config = parse_stack_config(load_stack_file("onprem-ib")[0])
    assert config.onprem_pricing is not None
    costs = {c.pool: c for c in pool_costs(config, load_snapshot())}
    pricing = config.onprem_pricing
    assert costs["h100-ib"].usd_per_node_hour == pytest.approx(
        8 * pricing.gpu_hour_usd + 224 * pricing.cpu_hour_usd + 2048 * pricing.memory_gib_hour_usd
    )
    assert onprem_node_hour(pricing, 0, 1, 0) == pricing.cpu_hour_usd


def test_make_cost_errors_are_one_screen(capsys: pytest.CaptureFixture[str]) -> None:
    assert cost.main(["uae-prd"]) == 2
    err = capsys.readouterr().err
    assert "unknown stack 'uae-prd'" in err and "Traceback" not in err


def test_the_snapshot_prices_every_instance_type_the_stacks_use() -> None:
    snapshot = load_snapshot()
    assert set(stack_instance_types()) <= set(snapshot.instance_types)
    assert snapshot.region == "me-central-1" and snapshot.retrieved


def test_a_broken_snapshot_is_named(tmp_path: Path) -> None:
    path = tmp_path / "me-central-1.json"
    path.write_text('{"region": "me-central-1"}')
    with pytest.raises(PricingError, match="is not a valid price snapshot"):
        load_snapshot(path)
    with pytest.raises(PricingError, match="no price snapshot"):
        load_snapshot(tmp_path / "missing.json")


def test_the_price_list_parser_keeps_on_demand_linux_shared() -> None:
    answer = json.loads(FIXTURE.read_text())
    prices = parse_price_list(answer["PriceList"])
    assert set(prices) == {"p5en.48xlarge", "m7i.2xlarge"}
    p5en = prices["p5en.48xlarge"]
    assert (p5en.usd_per_hour, p5en.vcpus, p5en.memory_gib, p5en.gpus) == (12.34, 192, 2048, 8)
    assert prices["m7i.2xlarge"].gpus == 0 and prices["m7i.2xlarge"].usd_per_hour == 0.5


def test_the_refresh_asks_the_pricing_api_for_each_type_and_writes_a_dated_snapshot() -> None:
    answer = json.loads(FIXTURE.read_text())
    client = boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    for _ in ("m7i.2xlarge", "p5en.48xlarge"):
        # The stubber checks the request against botocore's model of GetProducts.
        stubber.add_response(
            "get_products",
            {"PriceList": answer["PriceList"], "FormatVersion": "aws_v1"},
            {"ServiceCode": "AmazonEC2", "Filters": ANY, "FormatVersion": "aws_v1"},
        )
    with stubber:
        prices = fetch_prices(client, "me-central-1", ["m7i.2xlarge", "p5en.48xlarge"])
    stubber.assert_no_pending_responses()
    document = snapshot_document("me-central-1", prices, dt.date(2026, 11, 23))
    assert document["verified"] is True and document["retrieved"] == "2026-11-23"
    assert document["instanceTypes"]["p5en.48xlarge"]["usdPerHour"] == 12.34


def test_the_refresh_names_a_type_without_a_price() -> None:
    client = boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    stubber.add_response("get_products", {"PriceList": [], "FormatVersion": "aws_v1"})
    with stubber, pytest.raises(PricingError, match=r"no on-demand Linux price for x9\.huge"):
        fetch_prices(client, "me-central-1", ["x9.huge"])
