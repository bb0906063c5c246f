"""`make cost` and the price snapshot: the estimate is the snapshot's prices times the
pools' hours; every shipped figure is the cited source's record; a figure without a
real price (unverified snapshot, no source price for a type) is never printed, only
node-hours and GPU-hours; the refresh parses the Pricing API's answer (request checked
against botocore's model of the service)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from stacks import cost
from stacks.config import parse_stack_config
from stacks.cost import cost_inputs, onprem_node_hour, pool_costs, price_problems, unit_prices
from stacks.offline_plan import load_stack_file
from stacks.pricing import (
    HOURS_PER_MONTH,
    PricingError,
    fetch_prices,
    load_snapshot,
    parse_price_list,
    snapshot_document,
    snapshot_path,
    stack_instance_types,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pricing_get_products.json"


def test_uae_prod_estimate_is_the_snapshot_prices_times_the_hours() -> None:
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    snapshot = load_snapshot()
    costs = pool_costs(config, snapshot)
    expected_min = sum(
        _price(snapshot.instance_types[p.instance_type].usd_per_hour) * HOURS_PER_MONTH * p.min_size
        for p in config.node_pools
    )
    expected_max = sum(
        _price(snapshot.instance_types[p.instance_type].usd_per_hour) * HOURS_PER_MONTH * p.max_size
        for p in config.node_pools
    )
    assert [c.pool for c in costs] == ["system", "h200", "preprocess"]
    assert sum(_price(c.monthly_min_usd) for c in costs) == pytest.approx(expected_min)
    assert sum(_price(c.monthly_max_usd) for c in costs) == pytest.approx(expected_max)
    # The p5en pool dominates the range: 4 nodes for a month.
    p5en = _price(snapshot.instance_types["p5en.48xlarge"].usd_per_hour)
    assert costs[1].monthly_max_usd == pytest.approx(p5en * 730 * 4)
    assert costs[1].gpu_hours == (0, 730 * 4 * 8)


def _price(value: float | None) -> float:
    assert value is not None
    return value


def test_make_cost_prints_the_range_with_its_source_and_date(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cost.main(["uae-prod"]) == 0
    out = capsys.readouterr().out
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    snapshot = load_snapshot()
    costs = pool_costs(config, snapshot)
    total = f"{sum(_price(c.monthly_min_usd) for c in costs):,.2f}"
    assert total in out and f"{sum(_price(c.monthly_max_usd) for c in costs):,.2f}" in out
    # Where the figures come from and of when: repository, path, commit, data date.
    assert snapshot.source_repository and snapshot.source_path and snapshot.source_commit
    for cited in (snapshot.source_repository, snapshot.source_path, snapshot.source_commit):
        assert cited in out
    assert "data date: not stated by the source" in out and "withheld" not in out


SOURCE_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
    "Arch",
)


def test_every_shipped_figure_is_the_cited_sources_record() -> None:
    """A figure typed in by hand (or copied from another region) fails: each type's price
    and shape must be its verbatim source row's, for me-central-1."""
    snapshot = load_snapshot()
    assert snapshot.verified and snapshot.region == "me-central-1"
    assert re.fullmatch(r"[0-9a-f]{40}", snapshot.source_commit or "")
    assert snapshot.source_repository == "https://github.com/skypilot-org/skypilot-catalog"
    for name, entry in snapshot.instance_types.items():
        assert entry.source_row is not None, name
        (row,) = list(csv.DictReader(io.StringIO(entry.source_row), fieldnames=SOURCE_COLUMNS))
        assert row["InstanceType"] == name and row["Region"] == "me-central-1", name
        assert float(row["Price"]) == entry.usd_per_hour, name
        assert float(row["vCPUs"]) == entry.vcpus, name
        assert float(row["MemoryGiB"]) == entry.memory_gib, name
        assert float(row["AcceleratorCount"] or 0) == entry.gpus, name


def _snapshot_file(tmp_path: Path, **changes: Any) -> Path:
    document = json.loads(snapshot_path().read_text())
    for key, value in changes.items():
        if key in document["instanceTypes"]:
            document["instanceTypes"][key]["usdPerHour"] = value
        else:
            document[key] = value
    path = tmp_path / "me-central-1.json"
    path.write_text(json.dumps(document))
    return path


def _run_cost(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path, stack: str
) -> str:
    monkeypatch.setattr(cost, "snapshot_path", lambda region="me-central-1": path)
    assert cost.main([stack]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("stack", ["uae-prod", "uae-dev", "smb-cpu"])
def test_an_unverified_snapshot_prints_no_dollar_figure(
    stack: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _run_cost(monkeypatch, capsys, _snapshot_file(tmp_path, verified=False), stack)
    # The LLM gateway's table prices tokens at the stack file's own prices, not the
    # snapshot's (docs/llm-gateway.md): it is not part of what the snapshot withholds.
    out = out.split("\nLLM gateway:")[0]
    # No decimal figure at all: node-hours and GPU-hours are whole numbers.
    assert re.search(r"\d\.\d", out) is None, out
    assert "NOT verified" in out and "withheld" in out
    assert f"{730 * 2:,}" in out or f"{730:,}" in out  # node-hours are still reported


def test_a_type_without_a_source_price_withholds_its_pool_and_the_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _snapshot_file(tmp_path, **{"p5en.48xlarge": None})
    out = _run_cost(monkeypatch, capsys, path, "uae-prod")
    h200 = next(line for line in out.splitlines() if line.startswith("h200 ") and "p5en" in line)
    assert h200.count("withheld") == 3 and re.search(r"\d\.\d", h200) is None
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.split()[1:] == ["withheld", "withheld"]
    assert "Withheld: no real price for pool(s) h200" in out
    assert "75.9552" not in out and "23,360" in out  # GPU-hours stay


def test_withheld_prices_give_opencost_nothing_and_refuse_budgets(tmp_path: Path) -> None:
    snapshot = load_snapshot(_snapshot_file(tmp_path, **{"m7i.2xlarge": None}))
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    assert unit_prices(config, snapshot) is None
    assert cost_inputs(config, snapshot, "aws-me-central-1") is None
    (problem,) = price_problems(config, snapshot)
    assert problem.startswith("uae-gpu-platform:budgets:") and "pool(s) system" in problem
    assert "make prices-refresh" in problem
    shipped = load_snapshot()
    assert price_problems(config, shipped) == []
    assert cost_inputs(config, shipped, "aws-me-central-1") is not None


def test_a_snapshot_whose_verified_flag_is_not_a_boolean_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PricingError, match="verified must be true or false"):
        load_snapshot(_snapshot_file(tmp_path, verified="yes"))


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
    assert all(snapshot.price(t) is not None for t in stack_instance_types())


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


def test_the_refresh_asks_the_pricing_api_for_each_type_and_writes_a_dated_snapshot(
    tmp_path: Path,
) -> None:
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
        prices, data_date = fetch_prices(client, "me-central-1", ["m7i.2xlarge", "p5en.48xlarge"])
    stubber.assert_no_pending_responses()
    assert data_date == max(json.loads(i)["publicationDate"][:10] for i in answer["PriceList"])
    document = snapshot_document("me-central-1", prices, dt.date(2026, 11, 23), data_date)
    assert document["verified"] is True and document["retrieved"] == "2026-11-23"
    assert document["dataDate"] == data_date
    assert document["instanceTypes"]["p5en.48xlarge"]["usdPerHour"] == 12.34
    path = tmp_path / "refreshed.json"
    path.write_text(json.dumps(document))
    refreshed = load_snapshot(path)
    assert refreshed.price("p5en.48xlarge") == 12.34
    assert data_date is not None and data_date in refreshed.citation()


def test_the_refresh_names_a_type_without_a_price() -> None:
    client = boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    stubber.add_response("get_products", {"PriceList": [], "FormatVersion": "aws_v1"})
    with stubber, pytest.raises(PricingError, match=r"no on-demand Linux price for x9\.huge"):
        fetch_prices(client, "me-central-1", ["x9.huge"])
