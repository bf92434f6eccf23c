"""Spot interruption rates per pool, as data with their source (data/interruption_rates.json).

The AWS Spot Instance Advisor gives, per region and instance type, a band of the share of Spot capacity
reclaimed during the trailing month (<5%, 5-10%, 10-15%, 15-20%, >20%). The scheduler's lifecycle stage
needs a rate per instance-hour: a monthly share p becomes -ln(1 - p) / 730 (the hazard of an exponential
clock that reclaims a share p of instances within a month of 730 hours). A band is taken at its upper
edge, so rework is not underestimated, except >20%, which has none and is taken at 20% (a lower bound:
the file says so with `edge`). A pool without a reading takes the file's default band. Refreshed by
`python -m lambdas.common.interruption_rates_refresh`.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

RATES_PATH = Path(__file__).with_name("data") / "interruption_rates.json"
HOURS_PER_MONTH = 730.0


class InterruptionRatesError(ValueError):
    """The data file is malformed; the message names the key and the bad value."""


@dataclass(frozen=True)
class Band:
    index: int
    label: str
    monthly_share: float
    edge: str

    @property
    def per_hour(self) -> float:
        return -math.log(1 - self.monthly_share) / HOURS_PER_MONTH


@dataclass(frozen=True)
class InterruptionRates:
    bands: tuple[Band, ...]
    default_band: int
    readings: dict  # region -> {instance type -> band index}
    read_on: str | None

    def band(self, region: str, instance_type: str) -> Band:
        return self.bands[self.readings.get(region, {}).get(instance_type, self.default_band)]

    def per_hour(self, region: str, instance_type: str) -> float:
        return self.band(region, instance_type).per_hour


def parse_rates(document: dict) -> InterruptionRates:
    bands = []
    for n, band in enumerate(document.get("bands") or ()):
        share = band.get("monthly_share")
        if band.get("index") != n or not isinstance(share, (int, float)) or not 0 <= share < 1 \
                or band.get("edge") not in ("upper", "lower"):
            raise InterruptionRatesError(f"bands[{n}]={band!r}: needs index {n}, monthly_share in [0, 1) and edge "
                                         f"upper or lower")
        bands.append(Band(n, str(band.get("label")), float(share), band["edge"]))
    default = document.get("default_band")
    if not bands or not isinstance(default, int) or not 0 <= default < len(bands):
        raise InterruptionRatesError(f"default_band={default!r}: must index one of the {len(bands)} bands")
    readings = document.get("readings")
    if not isinstance(readings, dict):
        raise InterruptionRatesError(f"readings={readings!r}: must map region -> instance type -> band index")
    for region, types in readings.items():
        for name, index in (types or {}).items():
            if not isinstance(index, int) or not 0 <= index < len(bands):
                raise InterruptionRatesError(f"readings.{region}.{name}={index!r}: not a band index (0-{len(bands) - 1})")
    return InterruptionRates(tuple(bands), default, {r: dict(t or {}) for r, t in readings.items()},
                             document.get("read_on"))


@functools.lru_cache(maxsize=None)
def load_interruption_rates(path: str | None = None) -> InterruptionRates:
    return parse_rates(json.loads(Path(path or RATES_PATH).read_text()))
