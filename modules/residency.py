"""Where data may live: the one definition the stack config and the policy pack share.

A stack or a pack config may narrow these lists, never widen them, so residency cannot
be configured away.
"""

from __future__ import annotations

# AWS regions inside the UAE. me-south-1 is Bahrain and il-central-1 is Israel.
UAE_AWS_REGIONS: tuple[str, ...] = ("me-central-1",)
# ISO 3166-1 alpha-2 codes of the countries on-premises sites may be in.
UAE_COUNTRIES: tuple[str, ...] = ("AE",)
