"""``python -m dpsmooth_spark synthesize|ledger --config FILE`` (synthesize = ``jobs/synthesize.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dpsmooth_spark.config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsmooth_spark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    synth = sub.add_parser("synthesize", help="release a DP synthetic copy of a table")
    synth.add_argument("--config", required=True, help="release config (YAML)")
    synth.add_argument("--release-id", help="idempotency key, e.g. the scheduler's run id")
    synth.add_argument("--quiet", action="store_true", help="no progress lines")
    ledger = sub.add_parser("ledger", help="show the budget ledger of a config's input table")
    ledger.add_argument("--config", required=True, help="release config (YAML)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for bad config or input)."""
    args = _parser().parse_args(argv)
    from dpsmooth_spark.pipeline.synthesize import InvalidDataError, run_synthesize
    from dpsmooth_spark.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerConflictError
    from dpsmooth_spark.spark.io import InputError, OutputExistsError

    refusals = (ConfigError, InputError, InvalidDataError, OutputExistsError, BudgetExceededError,
                LedgerConflictError)
    try:
        overrides = {"release_id": args.release_id} if getattr(args, "release_id", None) else None
        config = load_config(args.config, overrides)
        if args.command == "ledger":
            print(BudgetLedger(config.ledger_path).format(config.table_id))
            return 0
        report = run_synthesize(config, quiet=args.quiet)
    except refusals as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.output_path)
    return 0
