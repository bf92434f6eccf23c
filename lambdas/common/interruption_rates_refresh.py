"""Refresh data/interruption_rates.json from the AWS Spot Instance Advisor's feed.

    python -m lambdas.common.interruption_rates_refresh [--regions us-east-1 ...] [--output PATH]
                                                        [--feed URL]

The feed (https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json, the data behind
https://aws.amazon.com/ec2/spot/instance-advisor/) needs no AWS credentials. Its `ranges` list the
bands (index, label); `spot_advisor.<region>.Linux.<type>.r` is a pool's band index. Only catalog types
are kept; the bands of the file are checked against the feed's labels, so a change of bands fails the
refresh instead of silently re-meaning the indices.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from datetime import date
from pathlib import Path

from .catalog import load_catalog
from .interruption_rates import RATES_PATH, InterruptionRatesError, parse_rates

FEED = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"


def readings_from_feed(feed: dict, bands: list[dict], regions: list[str], types: set[str]) -> dict:
    """Region -> type -> band index, for the catalog's types, after checking the feed's bands."""
    labels = [r.get("label", "").replace(" ", "") for r in sorted(feed.get("ranges", []), key=lambda r: r.get("index", 0))]
    ours = [b["label"].replace(" ", "") for b in bands]
    if labels != ours:
        raise InterruptionRatesError(f"the feed's ranges {labels!r} are not the file's bands {ours!r}: "
                                     f"update bands in {RATES_PATH.name} first")
    readings = {}
    for region in regions:
        pools = (feed.get("spot_advisor", {}).get(region) or {}).get("Linux") or {}
        found = {name: int(pool["r"]) for name, pool in pools.items() if name in types and "r" in pool}
        if found:
            readings[region] = dict(sorted(found.items()))
    return readings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", nargs="+", default=["us-east-1", "us-east-2", "us-west-2"])
    parser.add_argument("--output", type=Path, default=RATES_PATH)
    parser.add_argument("--feed", default=FEED)
    args = parser.parse_args(argv)
    document = json.loads(args.output.read_text())
    with urllib.request.urlopen(args.feed, timeout=60) as response:  # noqa: S310 (a fixed https URL)
        feed = json.load(response)
    document["readings"] = readings_from_feed(feed, document["bands"], args.regions, set(load_catalog().names()))
    document["read_on"] = date.today().isoformat()
    parse_rates(document)  # refuse to write a file the loader would refuse
    args.output.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{args.output}: {sum(len(t) for t in document['readings'].values())} pools in "
          f"{len(document['readings'])} regions, read on {document['read_on']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
