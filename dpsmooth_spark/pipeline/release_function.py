"""The release-function job: the Bernstein mechanism (Alda and Rubinstein, Algorithm 1).

``kde``: one Spark pass sums the kernel at every lattice point. ``svm`` / ``logistic``: one pass
counts the rows, a Bernoulli sample of about ``oracle_max_rows`` rows is trained on the driver,
and the trained decision function is evaluated on the lattice. Either way only the noisy lattice
values (and public facts) are written, as ``bernstein.json``.
"""

from __future__ import annotations

import numpy as np

from dpsmooth_spark.config import ReleaseConfig
from dpsmooth_spark.mechanisms.bernstein_release import (
    BernsteinRelease,
    kde_bandwidths,
    kde_sums,
    lattice_points,
    release_erm,
    release_kde,
    sample_rate,
)
from dpsmooth_spark.mechanisms.stages import release_count
from dpsmooth_spark.pipeline.release import ReleaseReport, ReleaseRun

MECHANISM = "bernstein"


def run_release_function(config: ReleaseConfig, quiet: bool = False) -> ReleaseReport:
    """Release the configured function of the table by the Bernstein mechanism."""
    params = config.bernstein
    axes = config.bernstein_axes()
    index = [config.column_names.index(a) for a in axes]
    run = ReleaseRun.start(config, MECHANISM, quiet)
    bounds = run.bounds  # encoded bounds (an integer column's lattice cells, docs/mechanisms.md)
    lower, upper = bounds.lower[index], bounds.upper[index]
    points = lattice_points(params.k, lower, upper)  # refuses a huge lattice before any pass
    if run.previous is None:
        with run.charged():
            if params.function == "kde":
                widths = kde_bandwidths(params, lower, upper)
                sums = run.statistic_pass(lambda x: kde_sums(x[:, index], points, widths))
                accountant = run.new_accountant()
                with run.log.stage("noise"):
                    release = release_kde(
                        sums.values, sums.count, params, axes, lower, upper, accountant, run.noise
                    )
            else:
                assert params.label is not None  # the config validator requires it
                # the pass's row counters suffice
                counted = run.statistic_pass(lambda x: np.zeros(0))
                accountant = run.new_accountant()
                noisy_count = release_count(
                    counted.count, params.count_fraction, accountant, run.noise
                )
                rate = sample_rate(params, noisy_count)
                with run.log.stage("oracle sample"):
                    rows = run.sample_rows(rate)
                label = config.column_names.index(params.label)
                middle = 0.5 * (bounds.lower[label] + bounds.upper[label])
                labels = np.where(rows[:, label] >= middle, 1.0, -1.0)
                with run.log.stage(f"train {params.function} and noise"):
                    release = release_erm(
                        rows[:, index],
                        labels,
                        noisy_count,
                        rate,
                        params,
                        axes,
                        lower,
                        upper,
                        accountant,
                        run.noise,
                    )
            run.persist(accountant, {"columns": config.column_names, "release": release.to_dict()})
    else:
        release = BernsteinRelease.from_dict(run.previous.statistics["release"])
        accountant = run.reused_accountant()
    mechanism = {
        "reference": "Alda and Rubinstein, The Bernstein Mechanism: Function Release under "
        "Differential Privacy, AAAI 2017, Algorithm 1 (Theorem 7 in the (epsilon, delta) mode)",
        "parameters": params.model_dump(mode="json"),
        "function": release.function,
        "axes": axes,
        "lattice_points": int(release.values.size),
        "sensitivity_per_point": release.sensitivity,
        "noise_scale_per_point": release.noise_scale,
        "details": release.details,
    }
    output = {
        "files": "bernstein.json (noisy lattice values; evaluate with `query`), manifest.json"
    }
    manifest = run.manifest(accountant, mechanism, output, {})
    return run.write(None, {"bernstein.json": release.to_dict()}, manifest)
