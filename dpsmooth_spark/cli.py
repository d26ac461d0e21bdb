"""``python -m dpsmooth_spark synthesize --config FILE``: the same pipeline as ``jobs/synthesize.py``."""

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for bad config or input)."""
    args = _parser().parse_args(argv)
    from dpsmooth_spark.pipeline.synthesize import InvalidDataError, run_synthesize
    from dpsmooth_spark.spark.io import InputError, OutputExistsError

    try:
        overrides = {"release_id": args.release_id} if args.release_id else None
        config = load_config(args.config, overrides)
        report = run_synthesize(config, quiet=args.quiet)
    except (ConfigError, InputError, InvalidDataError, OutputExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.output_path)
    return 0
