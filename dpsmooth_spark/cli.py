"""``python -m dpsmooth_spark COMMAND``: the release jobs, ``evaluate``, ``ledger``, and the
data-free ``answer`` (smooth queries from a summary) and ``query`` (points against a Bernstein or
distance release).

The jobs are the same pipelines as ``jobs/*.py`` (the spark-submit entry points).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from dpsmooth_spark.config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsmooth_spark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("synthesize", "release a DP synthetic copy of a table"),
        ("synthesize-grid", "release a DP synthetic copy by the exact grid LP (Algorithm 3)"),
        ("summarize", "release the DP smooth-query summary of a table (Algorithm 1)"),
        ("release-function", "release a function of the table by the Bernstein mechanism"),
        ("release-distances", "release a structure answering distance queries (Huang-Roth)"),
    ):
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
    ask = sub.add_parser(
        "answer", help="answer a smooth query from a released summary (Algorithm 2)"
    )
    ask.add_argument("--summary", required=True, help="summary.json or its release folder")
    ask.add_argument(
        "--query",
        required=True,
        help="e.g. 'gaussian(center=[1, 2], sigma=0.5) + logistic(w=[1, -1], b=0)'",
    )
    ask.add_argument("--operator", choices=["chebyshev", "jackson"], default="chebyshev")
    ask.add_argument("--units", choices=["original", "scaled"], default="original")
    point = sub.add_parser("query", help="evaluate a Bernstein or distance release at query points")
    point.add_argument(
        "--release", required=True, help="release folder (bernstein.json or distances.json)"
    )
    point.add_argument(
        "--points",
        required=True,
        help="JSON list of points in original units, e.g. '[[0.5], [0.7]]'",
    )
    point.add_argument("--h", type=int, help="Bernstein order (default: the release's)")
    sub.add_parser("config-reference", help="print the configuration reference (docs/config.md)")
    ledger = sub.add_parser("ledger", help="show the budget ledger of a config's input table")
    ledger.add_argument("--config", required=True, help="release config (YAML)")
    _add_set(ledger)
    return parser


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. output.path=/lake/synth/2026-11-22 (repeatable)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for bad config, input or query)."""
    args = _parser().parse_args(argv)
    from dpsmooth_spark.pipeline.row_checks import InvalidDataError
    from dpsmooth_spark.privacy.ledger import (
        BudgetExceededError,
        BudgetLedger,
        LedgerConflictError,
        ReleaseRefusedError,
    )
    from dpsmooth_spark.spark.io import InputError, OutputExistsError

    refusals = (
        ConfigError,
        InputError,
        InvalidDataError,
        OutputExistsError,
        BudgetExceededError,
        LedgerConflictError,
        ReleaseRefusedError,
        ValueError,
        OSError,
    )
    try:
        if args.command == "config-reference":
            from dpsmooth_spark.config_reference import render

            print(render(), end="")
            return 0
        if args.command == "answer":
            return _answer(args)
        if args.command == "query":
            return _query(args)
        config = load_config(args.config, _overrides(args))
        if args.command == "evaluate":
            from dpsmooth_spark.pipeline.evaluate import run_evaluate

            run_evaluate(
                config,
                args.synthetic,
                args.out,
                args.label,
                args.queries,
                args.sample_rows,
                quiet=args.quiet,
            )
            print(f"{args.out}/report.html")
            return 0
        if args.command == "ledger":
            print(BudgetLedger(config.ledger_path).format(config.table_id))
            return 0
        if args.command == "summarize":
            from dpsmooth_spark.pipeline.summarize import run_summarize

            report = run_summarize(config, quiet=args.quiet)
        elif args.command == "release-function":
            from dpsmooth_spark.pipeline.release_function import run_release_function

            report = run_release_function(config, quiet=args.quiet)
        elif args.command == "release-distances":
            from dpsmooth_spark.pipeline.release_distances import run_release_distances

            report = run_release_distances(config, quiet=args.quiet)
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


def _query(args: argparse.Namespace) -> int:
    """Point queries against a released function or distance structure (no data access)."""
    from pathlib import Path

    import numpy as np

    from dpsmooth_spark.mechanisms.bernstein_release import BernsteinRelease
    from dpsmooth_spark.mechanisms.distance_release import DistanceRelease

    folder = Path(args.release)
    try:
        points = np.asarray(json.loads(args.points), dtype=np.float64)
    except (json.JSONDecodeError, TypeError, ValueError):
        raise ValueError(
            "--points must be a JSON list of points, e.g. '[[0.5, 1.0], [0.2, 0.3]]'"
        ) from None
    points = np.atleast_2d(points)
    if not np.isfinite(points).all():
        raise ValueError("--points must be finite numbers")
    if (folder / "bernstein.json").exists():
        release = BernsteinRelease.load(folder)
        _check_width(points, len(release.columns), release.columns)
        values = release.evaluate(points, args.h)
        kind = f"bernstein {release.function}"
    elif (folder / "distances.json").exists():
        distances = DistanceRelease.load(folder)
        _check_width(points, distances.bounds.d, list(distances.bounds.columns))
        values = distances.answer(points)
        kind = f"mean {distances.embedding.kind} distance"
    else:
        raise ValueError(f"{folder} holds neither bernstein.json nor distances.json")
    print(
        json.dumps(
            {"release": kind, "points": points.tolist(), "values": values.tolist()}, indent=1
        )
    )
    return 0


def _check_width(points: Any, width: int, columns: list[str]) -> None:
    if points.shape[1] != width:
        raise ValueError(f"each point needs {width} coordinates ({', '.join(columns)})")
