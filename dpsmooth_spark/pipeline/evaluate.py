"""The evaluate job: real table (Spark) vs a synthetic table or release, metrics and report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from dpsmooth_spark.config import ReleaseConfig
from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.evaluation.queries import PAPER_WDBC_EPS1
from dpsmooth_spark.evaluation.release_metrics import QuerySets, evaluate
from dpsmooth_spark.evaluation.report import write_report
from dpsmooth_spark.evaluation.verdict import verdict, verdict_text
from dpsmooth_spark.mechanisms.public_domains import PublicDomains
from dpsmooth_spark.pipeline import domains
from dpsmooth_spark.pipeline.progress import StageLog
from dpsmooth_spark.pipeline.release import input_codec, input_schema
from dpsmooth_spark.spark import data_pass, io, lake, locations, session


def run_evaluate(
    config: ReleaseConfig,
    synthetic_path: str,
    out_dir: str,
    label: str | None = None,
    queries: int = 10_000,
    sample_rows: int = 100_000,
    seed: int = 2016,
    quiet: bool = False,
) -> dict[str, Any]:
    """Evaluate ``synthetic_path`` (a release folder, a Delta release, or Parquet) against the
    config's input table.

    The real-side query answers come from one Spark pass over the whole table; row-level metrics
    use at most ``sample_rows`` real and synthetic rows. Writes ``metrics.json`` and
    ``report.html`` (led by the verdict against baselines) to ``out_dir`` and returns the metrics.
    """
    locations.check_no_overlap(config, extra_output=out_dir)
    log = StageLog(quiet=quiet)
    snapshot = io.input_snapshot(config.input)
    columns = config.column_names
    if label is not None and label not in columns:
        raise ValueError(f"label {label!r} is not one of the config's columns")

    release = Path(synthetic_path)
    documents = release
    with log.stage("read synthetic table"):
        if (release / "_delta_log").exists():  # a Delta release: its snapshot and side folder
            table, side = lake.read_delta_release(str(release), columns)
            documents = side or release
        else:
            table = pq.read_table(
                release / "data" if (release / "data").exists() else release, columns=columns
            )
    manifest = _json(documents / "manifest.json")
    codec = _release_codec(config, snapshot, manifest or {})
    bounds = codec.bounds()
    label_index = columns.index(label) if label is not None else None
    features = np.array([i for i in range(len(columns)) if i != label_index])
    query_sets = QuerySets.draw(len(columns), features, queries, seed)
    rng = np.random.default_rng(seed)
    synthetic = bounds.scale(_finite(codec.encode(table)))
    if synthetic.shape[0] > sample_rows:
        synthetic = synthetic[rng.choice(synthetic.shape[0], sample_rows, replace=False)]
    with log.stage("spark session"):
        spark = session.session_for(config.spark)
    with log.stage("real-side query answers (Spark pass)"):
        df = io.read_input(spark, config.input, codec, snapshot)
        real_sums = data_pass.statistic_sums(df, codec, query_sets.sums, unit="scaled")
        sums, rows = real_sums.values, real_sums.count
        if rows == 0:
            raise ValueError("the real table has no valid rows")
    with log.stage("real sample"):
        fraction = min(1.0, sample_rows / rows)
        valid = df.dropna()
        sample = (valid.sample(fraction=fraction, seed=seed) if fraction < 1 else valid).toArrow()
        real = bounds.scale(_finite(codec.encode(sample)))
    summary = _json(documents / "summary.json")
    with log.stage("metrics"):
        metrics = evaluate(
            real, synthetic, columns, query_sets, sums / rows, label_index, summary, seed
        )
        metrics["release"] = _describe(release, manifest, queries)
    with log.stage("verdict against baselines"):
        metrics["verdict"] = verdict(
            real,
            synthetic,
            columns,
            metrics["release"].get("epsilon"),
            label_index,
            min(queries, 2000),
            seed,
        )
    with log.stage("report"):
        reference = PAPER_WDBC_EPS1["worst_rel"] if len(features) == 30 else None
        path = write_report(
            Path(out_dir),
            metrics,
            real,
            synthetic,
            columns,
            {str(k): v for k, v in reference.items()} if reference else None,
        )
    for warning in metrics["release"].get("warnings", []):
        log.warning(f"the release says: {warning}")
    log.note(f"report: {path}")
    if not quiet:
        print(verdict_text(metrics["verdict"]))
    return metrics


def _release_codec(config: ReleaseConfig, snapshot: Any, manifest: dict[str, Any]) -> TableCodec:
    """The columns as the release typed them: auto bounds and values as its manifest states."""
    if not domains.has_auto(config.columns):
        return input_codec(config, snapshot)
    found = manifest.get("privacy", {}).get("public_domains")
    if found is None:
        raise ValueError("the config has auto domains but the release's manifest states none")
    schema = input_schema(config, snapshot)
    csv = config.input.format == "csv"
    provisional = domains.provisional_codec(config.columns, schema, csv)
    return domains.resolved_codec(
        config.columns, provisional, PublicDomains.from_dict(found), schema, csv
    )


def _finite(values: np.ndarray) -> np.ndarray:
    """The rows without a null or out-of-domain value (as the data pass drops them)."""
    return values[np.isfinite(values).all(axis=1)]


def _json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _describe(release: Path, manifest: dict[str, Any] | None, queries: int) -> dict[str, Any]:
    out: dict[str, Any] = {"path": str(release), "queries_per_family": queries}
    if manifest:
        privacy = manifest["privacy"]
        out.update(
            {
                "release_id": manifest["release_id"],
                "mechanism": manifest["mechanism"]["name"],
                "epsilon": privacy["epsilon"],
                "delta": privacy["delta"],
            }
        )
        out["warnings"] = privacy.get("warnings", [])
        out["description"] = (
            f"Release {manifest['release_id']} ({manifest['mechanism']['name']}, "
            f"epsilon = {privacy['epsilon']}, delta = {privacy['delta']}) at {release}"
        )
    else:
        out["description"] = f"Synthetic table at {release}"
    return out
