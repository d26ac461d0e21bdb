"""The release-distances job: the offline distance-query mechanism of Huang and Roth.

One Spark pass computes, for every proxy axis (a column for l1, a random projection for l2, a
Bourgain coordinate otherwise) and every point of the statistics grid, the counts and sums of the
values below and above it; the driver then runs the sparse-vector learner (all noise is drawn
there) and writes the learned tangents as ``distances.json``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpsmooth_spark.config import ConfigError, ReleaseConfig
from dpsmooth_spark.core.distances import STAT_FIELDS, grid_statistics
from dpsmooth_spark.mechanisms.distance_release import (
    DistanceRelease,
    Embedding,
    release_distances,
    statistics_grid,
)
from dpsmooth_spark.pipeline.release import ReleaseReport, ReleaseRun

MECHANISM = "distance_queries"


def read_queries(path: str, columns: list[str]) -> np.ndarray:
    """Query points (the config's columns) from a Parquet or CSV file: public input, checked."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    file = Path(path)
    if not file.exists():
        raise ConfigError(f"distance.queries: file not found: {path}")
    table = pacsv.read_csv(file) if file.suffix.lower() == ".csv" else pq.read_table(file)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ConfigError(f"distance.queries: columns missing from {path}: {missing}")
    x = np.column_stack(
        [table.column(c).to_numpy(zero_copy_only=False).astype(np.float64) for c in columns]
    )
    if x.shape[0] == 0 or not np.isfinite(x).all():
        raise ConfigError(f"distance.queries: {path} must hold at least one row of finite numbers")
    return x


def run_release_distances(config: ReleaseConfig, quiet: bool = False) -> ReleaseReport:
    """Release the data structure that answers distance queries (docs/mechanisms.md)."""
    params = config.distance
    queries = read_queries(params.queries, config.column_names) if params.queries else None
    run = ReleaseRun.start(config, MECHANISM, quiet)
    bounds = run.bounds
    if run.previous is None:
        with run.charged():
            seed = (
                params.embedding_seed
                if params.embedding_seed is not None
                else int(run.rng.integers(2**62))
            )
            embedding = Embedding.build(params, bounds, queries, np.random.default_rng(seed))
            grid = statistics_grid(params)
            stats = run.statistic_pass(lambda x: grid_statistics(embedding(x), grid).ravel())
            accountant = run.new_accountant()
            with run.log.stage("sparse vector and tangents"):
                release = release_distances(
                    stats.values.reshape(embedding.dim, grid.size, STAT_FIELDS),
                    stats.count,
                    embedding,
                    params,
                    accountant,
                    run.noise,
                )
            run.persist(accountant, {"columns": config.column_names, "release": release.to_dict()})
    else:
        release = DistanceRelease.from_dict(run.previous.statistics["release"])
        accountant = run.reused_accountant()
    mechanism = {
        "reference": "Huang and Roth, Exploiting Metric Structure for Efficient Private Query "
        "Release, SODA 2014, Theorem 3.2 (l1), Lemma 4.1 (l2), Figure 3 (Bourgain)",
        "parameters": params.model_dump(mode="json"),
        "metric": params.metric,
        "proxy_axes": release.embedding.dim,
        "alpha_per_axis": release.alpha,
        "grid_points": release.grid_points,
        "updates_used": release.updates_used,
        "max_updates": release.max_updates,
        "sparse_vector_queries": release.queries_asked,
    }
    output = {"files": "distances.json (answers distance queries; use `query`), manifest.json"}
    manifest = run.manifest(accountant, mechanism, output, {})
    return run.write(None, {"distances.json": release.to_dict()}, manifest)
