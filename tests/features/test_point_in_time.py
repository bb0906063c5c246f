"""Point-in-time correctness of the training retrieval: no feature value from after a
label event's timestamp reaches that event's row.

Two checks. A hand-made customer whose values change between and after its label
events, where any leak changes the row. And the generated data set: every row Feast
returns equals an independent backward as-of join (pandas ``merge_asof``, within the
views' TTLs), the rows Feast leaves out are exactly those with no value at their time,
and enough rows have a *different* value right after their timestamp (often the churn
itself) that a forward-looking join could not pass.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workloads.features import data, model, repo


def apply_store(workdir: Path, dataset: data.Dataset) -> Any:
    from feast import FeatureStore  # noqa: PLC0415

    dataset.write(workdir / "data")
    (workdir / "repo").mkdir(parents=True)
    store = FeatureStore(config=repo.local_config(workdir))
    store.apply(repo.definitions(workdir / "data"))
    return store


def ts(text: str) -> pd.Timestamp:
    return pd.Timestamp(text, tz="UTC")


def activity_row(customer: int, at: str, logins: int, tickets: int, value: float) -> dict[str, Any]:
    return {
        "customer_id": customer,
        "event_timestamp": ts(at),
        "logins_7d": logins,
        "transactions_30d": logins * 2,
        "transaction_value_30d_aed": value,
        "support_tickets_30d": tickets,
        "days_since_last_login": 0 if logins else 9,
    }


def test_hand_made_customer_gets_only_past_values(tmp_path: Path) -> None:
    profiles = pd.DataFrame(
        [
            {"customer_id": 1, "event_timestamp": ts("2025-01-01"), "plan_price_aed": 99.0,
             "seats": 2, "contract_monthly": 1},
            # An upgrade on 2025-01-10 12:00: label events before it see the old plan.
            {"customer_id": 1, "event_timestamp": ts("2025-01-10 12:00"), "plan_price_aed": 799.0,
             "seats": 20, "contract_monthly": 1},
        ]
    )  # fmt: skip
    activity = pd.DataFrame(
        [
            activity_row(1, "2025-01-05 02:00", logins=10, tickets=1, value=1000.0),
            activity_row(1, "2025-01-12 02:00", logins=0, tickets=7, value=0.0),  # churned
            activity_row(1, "2025-01-19 02:00", logins=0, tickets=0, value=0.0),
        ]
    )
    labels = pd.DataFrame(
        {
            "customer_id": [1, 1, 1, 1],
            "event_timestamp": [
                ts("2025-01-04"),  # before any activity snapshot: no row
                ts("2025-01-10 11:59"),  # old plan, first snapshot
                ts("2025-01-12 02:00"),  # exactly at the second snapshot: it counts
                ts("2025-01-12 01:59"),  # one minute before it: it does not
            ],
            "churned_30d": [0, 1, 1, 1],
        }
    )
    store = apply_store(tmp_path, data.Dataset(profiles, activity, labels))
    got = (
        store.get_historical_features(entity_df=labels, features=repo.feature_refs())
        .to_df()
        .set_index("event_timestamp")
    )
    # Feast's file offline store leaves out an event with no activity value at its time
    # (rather than returning it with missing features); training drops such rows anyway.
    assert ts("2025-01-04") not in got.index
    before_upgrade = got.loc[ts("2025-01-10 11:59")]
    assert before_upgrade["plan_price_aed"] == 99.0 and before_upgrade["seats"] == 2
    assert before_upgrade["logins_7d"] == 10 and before_upgrade["support_tickets_30d"] == 1
    # The on-demand ratios are computed from the as-of values, not the later ones.
    assert before_upgrade["tickets_per_login"] == pytest.approx(1 / 11)
    assert before_upgrade["value_per_seat_aed"] == pytest.approx(500.0)
    just_before = got.loc[ts("2025-01-12 01:59")]
    assert just_before["logins_7d"] == 10 and just_before["plan_price_aed"] == 799.0
    at_snapshot = got.loc[ts("2025-01-12 02:00")]
    assert at_snapshot["logins_7d"] == 0 and at_snapshot["support_tickets_30d"] == 7
    assert at_snapshot["tickets_per_login"] == pytest.approx(7.0)


def as_of(labels: pd.DataFrame, table: pd.DataFrame, ttl: timedelta) -> pd.DataFrame:
    """The backward as-of join, by hand: the newest row at or before each label event
    and not older than ``ttl``."""
    left = labels.sort_values("event_timestamp").reset_index(drop=True)
    right = table.rename(columns={"event_timestamp": "feature_timestamp"}).sort_values(
        "feature_timestamp"
    )
    return pd.merge_asof(
        left,
        right,
        left_on="event_timestamp",
        right_on="feature_timestamp",
        by="customer_id",
        direction="backward",
        allow_exact_matches=True,
        tolerance=pd.Timedelta(ttl),
    )


def test_generated_data_has_no_leak(tmp_path: Path) -> None:
    dataset = data.generate(customers=300, weeks=20, seed=11)
    store = apply_store(tmp_path, dataset)
    got = store.get_historical_features(
        entity_df=dataset.labels, features=repo.feature_refs()
    ).to_df()
    expected = as_of(dataset.labels, dataset.profiles, repo.PROFILE_TTL).drop(
        columns="feature_timestamp"
    )
    expected = as_of(expected, dataset.activity, repo.ACTIVITY_TTL)
    complete = expected.dropna(subset=list(repo.BASE_FEATURES))
    keys = ["customer_id", "event_timestamp"]
    # Exactly the events with a value at their time come back, each once.
    assert sorted(map(tuple, got[keys].to_numpy().tolist())) == sorted(
        map(tuple, complete[keys].to_numpy().tolist())
    )
    merged = complete.merge(got, on=keys, suffixes=("_expected", ""))
    assert len(merged) == len(complete)
    for name in repo.BASE_FEATURES:
        np.testing.assert_array_equal(
            merged[name].to_numpy(dtype=float), merged[f"{name}_expected"].to_numpy(dtype=float)
        )
    derived = repo.derive(
        {name: merged[f"{name}_expected"].tolist() for name in repo.BASE_FEATURES}
    )
    for name in repo.DERIVED_FEATURES:
        np.testing.assert_allclose(merged[name].to_numpy(dtype=float), derived[name], rtol=1e-12)
    # The check has teeth: many events' *next* snapshot differs from the as-of one
    # (and for churned customers it is the idle account), so a forward join would fail.
    after = pd.merge_asof(
        complete.sort_values("event_timestamp")[keys],
        dataset.activity.sort_values("event_timestamp"),
        on="event_timestamp",
        by="customer_id",
        direction="forward",
        allow_exact_matches=False,
    ).merge(complete, on=keys, suffixes=("_next", ""))
    differs = after["logins_7d_next"].notna() & (after["logins_7d_next"] != after["logins_7d"])
    assert differs.sum() > 0.5 * len(after)
    churned_next_idle = (after["churned_30d"] == 1) & (after["logins_7d_next"] == 0)
    assert churned_next_idle.sum() >= 20
    # And training uses these rows as they are (dropping none with every feature).
    training = model.training_set(store, dataset.labels)
    assert len(training.frame) == len(complete)
