"""``python -m dpsmooth_spark synthesize|synthesize-grid|summarize|answer|evaluate|ledger``.

The jobs are the same pipelines as ``jobs/synthesize.py``, ``jobs/synthesize_grid.py`` and
``jobs/summarize.py`` and ``jobs/evaluate.py``; ``answer`` reads a released summary and touches no data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from dpsmooth_spark.config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsmooth_spark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("synthesize", "release a DP synthetic copy of a table"),
                       ("synthesize-grid", "release a DP synthetic copy by the exact grid LP (Algorithm 3)"),
                       ("summarize", "release the DP smooth-query summary of a table (Algorithm 1)")):
        job = sub.add_parser(name, help=text)
        job.add_argument("--config", required=True, help="release config (YAML)")
        job.add_argument("--release-id", help="idempotency key, e.g. the scheduler's run id")
        job.add_argument("--quiet", action="store_true", help="no progress lines")
        _add_set(job)
    ev = sub.add_parser("evaluate", help="compare a synthetic table or release with the real table")
    ev.add_argument("--config", required=True, help="the release config (real input and bounds)")
    ev.add_argument("--synthetic", required=True, help="release folder or Parquet path")
    ev.add_argument("--out", required=True, help="folder for report.html and metrics.json")
    ev.add_argument("--label", help="0/1 label column for the SVM test")
    ev.add_argument("--queries", type=int, default=10_000, help="queries per family")
    ev.add_argument("--sample-rows", type=int, default=100_000, help="rows for row-level metrics")
    ev.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_set(ev)
    ask = sub.add_parser("answer", help="answer a smooth query from a released summary (Algorithm 2)")
    ask.add_argument("--summary", required=True, help="summary.json or its release folder")
    ask.add_argument("--query", required=True,
                     help="e.g. 'gaussian(center=[1, 2], sigma=0.5) + logistic(w=[1, -1], b=0)'")
    ask.add_argument("--operator", choices=["chebyshev", "jackson"], default="chebyshev")
    ask.add_argument("--units", choices=["original", "scaled"], default="original")
    ledger = sub.add_parser("ledger", help="show the budget ledger of a config's input table")
    ledger.add_argument("--config", required=True, help="release config (YAML)")
    _add_set(ledger)
    return parser


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. output.path=/lake/synth/2026-11-22 (repeatable)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for bad config, input or query)."""
    args = _parser().parse_args(argv)
    from dpsmooth_spark.pipeline.release import InvalidDataError
    from dpsmooth_spark.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerConflictError
    from dpsmooth_spark.spark.io import InputError, OutputExistsError

    refusals = (ConfigError, InputError, InvalidDataError, OutputExistsError, BudgetExceededError,
                LedgerConflictError, ValueError, OSError)
    try:
        if args.command == "answer":
            return _answer(args)
        config = load_config(args.config, _overrides(args))
        if args.command == "evaluate":
            from dpsmooth_spark.pipeline.evaluate import run_evaluate

            run_evaluate(config, args.synthetic, args.out, args.label, args.queries, args.sample_rows,
                         quiet=args.quiet)
            print(f"{args.out}/report.html")
            return 0
        if args.command == "ledger":
            print(BudgetLedger(config.ledger_path).format(config.table_id))
            return 0
        if args.command == "summarize":
            from dpsmooth_spark.pipeline.summarize import run_summarize

            report = run_summarize(config, quiet=args.quiet)
        elif args.command == "synthesize-grid":
            from dpsmooth_spark.pipeline.synthesize_grid import run_synthesize_grid

            report = run_synthesize_grid(config, quiet=args.quiet)
        else:
            from dpsmooth_spark.pipeline.synthesize import run_synthesize

            report = run_synthesize(config, quiet=args.quiet)
    except refusals as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.output_path)
    return 0


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    """``--set key=value`` pairs (values parsed as YAML) and ``--release-id``."""
    import yaml

    out: dict[str, object] = {}
    for item in getattr(args, "set", []):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    if getattr(args, "release_id", None):
        out["release_id"] = args.release_id
    return out


def _answer(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from dpsmooth_spark.mechanisms.smooth_summary import SmoothSummary, answer, parse_query

    summary = SmoothSummary.load(args.summary)
    query = parse_query(args.query, summary.bounds.d)
    print(json.dumps(asdict(answer(summary, query, args.operator, args.units)), indent=1))
    return 0
