"""The synthesize-grid job: Algorithm 3, the exact grid LP, for small d.

Two passes: the first releases the noisy count, which sets ``t, N, L, m`` (Theorem 17); the
second sums the tensor basis over the table snapped to the ``N``-point grid.
"""

from __future__ import annotations

import numpy as np

from dpsmooth_spark.config import ReleaseConfig
from dpsmooth_spark.core.kernel import PassSpec
from dpsmooth_spark.mechanisms.smooth_grid import (
    GridRelease,
    fit_grid,
    plan_grid,
    release_grid,
    sample_grid,
)
from dpsmooth_spark.mechanisms.stages import release_count
from dpsmooth_spark.pipeline.release import ReleaseReport, ReleaseRun

MECHANISM = "smooth_grid"


def run_synthesize_grid(config: ReleaseConfig, quiet: bool = False) -> ReleaseReport:
    """Release a synthetic table by Algorithm 3 (refuses LPs above ``grid.max_lp_entries``)."""
    params = config.grid
    run = ReleaseRun.start(config, MECHANISM, quiet)
    if run.previous is None:
        with run.charged():
            accountant = run.new_accountant()
            counted = run.exact_sums(PassSpec(degree=1))
            noisy_count = release_count(counted.count, params.count_fraction, accountant, run.noise)
            # a refusal here depends on the noisy count: charged() records the spend first
            plan = plan_grid(noisy_count, run.bounds.d, params, config.privacy.delta)
            spec = PassSpec(1, plan.degree, plan.grid_points)
            sums = run.data_pass(spec, "data pass on the grid")
            with run.log.stage("noise"):
                release = release_grid(
                    sums,
                    run.bounds,
                    plan,
                    noisy_count,
                    accountant.share(1.0 - params.count_fraction),
                    accountant,
                    run.noise,
                )
                run.persist(accountant, release.to_dict())
    else:
        release = GridRelease.from_dict(run.previous.statistics)
        accountant = run.reused_accountant()
    plan = release.plan
    run.log.note(
        f"t = {plan.degree}, N = {plan.grid_points}, L = {plan.levels}: LP with "
        f"{plan.degree**run.bounds.d - 1} rows and {plan.grid_points**run.bounds.d} columns"
    )
    with run.log.stage("LP"):
        points, weights, objective = fit_grid(release, params.lp_solver)
    rows = config.output.rows or plan.rows
    with run.log.stage("sampling"):
        values = run.bounds.unscale(sample_grid(points, weights, rows, run.rng))
        table = run.codec.decode(values)
    mechanism = {
        "reference": "Wang et al., Differentially Private Data Releasing for Smooth Queries, "
        "JMLR 2016, Algorithm 3 (Section 5.1 in the (epsilon, delta) mode)",
        "parameters": params.model_dump(mode="json"),
        "degree": plan.degree,
        "grid_points": plan.grid_points,
        "levels": plan.levels,
        "lp_objective_l1": objective,
        "lp_support": int((weights > 0).sum()),
    }
    output = {
        "rows": rows,
        "distinct_rows": int(np.count_nonzero(weights > 0)),
        "files": "data/*.parquet, summary.json (DP rounded targets), manifest.json",
    }
    manifest = run.manifest(accountant, mechanism, output, {})
    return run.write(table, {"summary.json": release.to_dict()}, manifest)
