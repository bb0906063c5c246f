"""A seeded generator of SMB customer-churn data: event-timestamped Parquet files.

The story: a UAE provider of point-of-sale and payments software sells monthly or
annual plans to small businesses. Each customer has

- a **profile** (plan price in AED, seats, monthly or annual contract) that changes
  when the customer upgrades or downgrades (``profiles.parquet``);
- weekly **activity** snapshots (logins over 7 days, transactions and their value over
  30 days, support tickets over 30 days, days since the last login)
  (``activity.parquet``);
- **label events**: moments at which the business would have asked "will this customer
  churn within 30 days?", with the answer (``labels.parquet``).

A latent account health drifts week by week; activity follows it with noise and churn
is likelier when it is low. After a customer churns its snapshots go on for a few weeks
showing an idle account (no logins, no transactions). Label events fall *between*
snapshots, so the snapshot right after a label event often already shows the churn: a
join that took any feature value from after the event's timestamp would leak the
answer, which is what the point-in-time test relies on.

Everything is derived from one seed: the same seed gives byte-identical data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.features.offline import OfflineStore

#: The first weekly snapshot (a Sunday, 02:00 UTC; fixed so that runs are repeatable).
START = datetime(2025, 1, 5, 2, 0, tzinfo=UTC)
#: A label's outcome window: churned within this long after the label event.
HORIZON = timedelta(days=30)
#: Snapshots kept after a customer churned (an idle account until it is closed).
IDLE_WEEKS_AFTER_CHURN = 4

PLANS = (  # (plan price AED / month, seats low, seats high, share of customers)
    (99.0, 1, 3, 0.5),
    (299.0, 3, 10, 0.35),
    (799.0, 10, 40, 0.15),
)

PROFILE_FILE = "profiles.parquet"
ACTIVITY_FILE = "activity.parquet"
LABEL_FILE = "labels.parquet"


@dataclass(frozen=True)
class Dataset:
    """The three tables (pandas frames; timestamps are UTC)."""

    profiles: pd.DataFrame
    activity: pd.DataFrame
    labels: pd.DataFrame

    def write(self, directory: Path) -> dict[str, Path]:
        """Write the three Parquet files into ``directory``; returns their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = {
            "profiles": directory / PROFILE_FILE,
            "activity": directory / ACTIVITY_FILE,
            "labels": directory / LABEL_FILE,
        }
        self.profiles.to_parquet(paths["profiles"], index=False)
        self.activity.to_parquet(paths["activity"], index=False)
        self.labels.to_parquet(paths["labels"], index=False)
        return paths

    def publish(self, store: OfflineStore) -> dict[str, str]:
        """Write the three Parquet files to an offline store (a directory or an S3
        prefix, SSE-KMS); returns their locations."""
        if not store.on_s3:
            return {name: str(path) for name, path in self.write(Path(store.uri)).items()}
        options = store.storage_options(write=True)
        frames = {"profiles": self.profiles, "activity": self.activity, "labels": self.labels}
        files = {"profiles": PROFILE_FILE, "activity": ACTIVITY_FILE, "labels": LABEL_FILE}
        locations = {name: store.path(files[name]) for name in frames}
        for name, frame in frames.items():
            frame.to_parquet(locations[name], index=False, storage_options=options)
        return locations


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


def generate(customers: int = 1500, weeks: int = 26, seed: int = 7) -> Dataset:
    """Generate ``customers`` customers over ``weeks`` weekly snapshots.

    Args:
        customers: number of customers (ids 1000 .. 1000 + customers - 1).
        weeks: weekly activity snapshots from `START`.
        seed: the seed of every random draw.
    """
    if customers < 1 or weeks < 6:
        raise ValueError("need at least 1 customer and 6 weeks (the label horizon is 30 days)")
    rng = np.random.default_rng(seed)
    end = START + timedelta(weeks=weeks)
    profile_rows: list[dict[str, object]] = []
    activity_rows: list[dict[str, object]] = []
    label_rows: list[dict[str, object]] = []
    shares = np.array([p[3] for p in PLANS])
    for index in range(customers):
        customer = 1000 + index
        plan = int(rng.choice(len(PLANS), p=shares / shares.sum()))
        price, seats_low, seats_high, _ = PLANS[plan]
        seats = int(rng.integers(seats_low, seats_high + 1))
        monthly = int(rng.random() < 0.6)
        # The profile as it was before the first snapshot (signed up some time ago).
        profile_at = START - timedelta(
            days=int(rng.integers(1, 400)), minutes=int(rng.integers(0, 1440))
        )
        profiles = [(profile_at, price, seats, monthly)]
        # Some customers change plan once during the period.
        if rng.random() < 0.2:
            changed_at = START + timedelta(minutes=int(rng.integers(0, weeks * 7 * 1440)))
            new_plan = int(np.clip(plan + rng.choice([-1, 1]), 0, len(PLANS) - 1))
            new_price, low, high, _ = PLANS[new_plan]
            profiles.append((changed_at, new_price, int(rng.integers(low, high + 1)), monthly))
        for at, p, s, m in profiles:
            profile_rows.append(
                {
                    "customer_id": customer,
                    "event_timestamp": at,
                    "plan_price_aed": p,
                    "seats": s,
                    "contract_monthly": m,
                }
            )

        health = float(rng.normal(0.0, 1.0))
        churn_at: datetime | None = None
        idle_since: datetime | None = None
        # Each customer's snapshot job runs at its own minute of the Sunday night.
        jitter = timedelta(minutes=int(rng.integers(0, 180)))
        for week in range(weeks):
            snapshot_at = START + timedelta(weeks=week) + jitter
            if churn_at is not None and snapshot_at > churn_at + timedelta(
                weeks=IDLE_WEEKS_AFTER_CHURN
            ):
                break
            current = [p for p in profiles if p[0] <= snapshot_at][-1]
            _, price_now, seats_now, monthly_now = current
            if churn_at is not None and snapshot_at >= churn_at:
                idle_since = idle_since or churn_at
                logins = 0
                transactions = 0
                value = 0.0
                tickets = int(rng.poisson(0.3))
                since_login = int((snapshot_at - idle_since).days) + int(rng.integers(3, 10))
            else:
                logins = int(rng.poisson(3.0 * seats_now * np.exp(0.4 * health)))
                transactions = int(rng.poisson(40.0 * (1 + plan) * np.exp(0.5 * health)))
                value = round(float(transactions * rng.lognormal(np.log(150.0), 0.4)), 2)
                tickets = int(rng.poisson(0.6 * np.exp(-0.7 * health)))
                since_login = int(rng.geometric(min(0.95, 0.15 + logins / 20.0))) - 1
            activity_rows.append(
                {
                    "customer_id": customer,
                    "event_timestamp": snapshot_at,
                    "logins_7d": logins,
                    "transactions_30d": transactions,
                    "transaction_value_30d_aed": value,
                    "support_tickets_30d": tickets,
                    "days_since_last_login": since_login,
                }
            )
            if churn_at is not None:
                continue
            # Churn during the coming week: likelier for unhealthy, monthly, unhappy
            # customers and for those paying much for little use.
            value_per_price = value / (price_now + 1.0)
            hazard = _sigmoid(
                -3.6
                - 1.3 * health
                + 0.9 * monthly_now
                + 0.35 * tickets
                - 0.02 * min(value_per_price, 100.0)
            )
            if rng.random() < hazard:
                churn_at = snapshot_at + timedelta(minutes=int(rng.integers(60, 7 * 1440 - 60)))
            health = 0.85 * health + float(rng.normal(0.0, 0.5))
        # Label events: random moments while the customer was still a customer, early
        # enough for the 30-day outcome to be known by the end of the data.
        for week in range(weeks):
            at = START + timedelta(weeks=week, minutes=int(rng.integers(0, 7 * 1440)))
            if at + HORIZON > end or rng.random() > 0.35:
                continue
            if churn_at is not None and at >= churn_at:
                break
            churned = int(churn_at is not None and at < churn_at <= at + HORIZON)
            label_rows.append(
                {"customer_id": customer, "event_timestamp": at, "churned_30d": churned}
            )
    profiles_df = pd.DataFrame(profile_rows)
    activity_df = pd.DataFrame(activity_rows)
    labels_df = pd.DataFrame(label_rows)
    for frame in (profiles_df, activity_df, labels_df):
        frame["customer_id"] = frame["customer_id"].astype("int64")
        frame["event_timestamp"] = pd.to_datetime(frame["event_timestamp"], utc=True)
    for column in ("seats", "contract_monthly"):
        profiles_df[column] = profiles_df[column].astype("int64")
    for column in ("logins_7d", "transactions_30d", "support_tickets_30d", "days_since_last_login"):
        activity_df[column] = activity_df[column].astype("int64")
    labels_df["churned_30d"] = labels_df["churned_30d"].astype("int64")
    return Dataset(
        profiles=profiles_df.sort_values(["customer_id", "event_timestamp"], ignore_index=True),
        activity=activity_df.sort_values(["customer_id", "event_timestamp"], ignore_index=True),
        labels=labels_df.sort_values(["event_timestamp", "customer_id"], ignore_index=True),
    )
