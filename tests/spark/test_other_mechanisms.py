"""The release-function (Bernstein) and release-distances (Huang-Roth) jobs on local Spark: the
Spark pass computes what the in-memory code computes, the manifest states the budget, the query
command answers from the release alone, retries reuse the statistics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpsmooth_spark.config import ConfigError, parse_config
from dpsmooth_spark.mechanisms.bernstein_release import BernsteinRelease, kde_bandwidths, kde_sums
from dpsmooth_spark.mechanisms.distance_release import DistanceRelease
from dpsmooth_spark.pipeline.release_distances import run_release_distances
from dpsmooth_spark.pipeline.release_function import run_release_function

pytestmark = pytest.mark.spark
COLUMNS = {"mean_radius": (6.981, 28.11), "mean_texture": (9.71, 39.28), "malignant": (0.0, 1.0)}


def config(tmp_path: Path, wdbc_config_dict: dict, **extra) -> dict:
    return {
        "input": wdbc_config_dict["input"],
        "columns": [{"name": k, "lower": lo, "upper": hi} for k, (lo, hi) in COLUMNS.items()],
        "privacy": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 1,
        "test_mode": True,
        "spark": {"master": "local[2]"},
        **extra,
    }


def data(wdbc_table, names):
    return np.column_stack([wdbc_table[c].to_numpy() for c in names])


def test_kde_release_job(spark, tmp_path, wdbc_config_dict, wdbc_table):
    raw = config(
        tmp_path,
        wdbc_config_dict,
        release_id="kde-1",
        bernstein={"function": "kde", "columns": ["mean_radius", "mean_texture"], "k": 6},
    )
    report = run_release_function(parse_config(raw), quiet=True)
    out = Path(report.output_path)
    release = BernsteinRelease.load(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["mechanism"]["name"] == "bernstein"
        and manifest["mechanism"]["lattice_points"] == 49
    )
    assert manifest["privacy"]["accounting"]["epsilon_spent"] == pytest.approx(1.0)
    # the noisy lattice is the exact lattice KDE plus noise of the stated scale (7 of 49 values
    # may exceed 3 noise scales only with probability < 1e-6 for Laplace noise)
    x = data(wdbc_table, ["mean_radius", "mean_texture"])
    params = parse_config(raw).bernstein
    widths = kde_bandwidths(params, release.lower, release.upper)
    from dpsmooth_spark.mechanisms.bernstein_release import lattice_points

    truth = kde_sums(x, lattice_points(6, release.lower, release.upper), widths) / x.shape[0]
    outside = np.abs(release.values - truth) > 3 * release.noise_scale + 0.05 * truth
    assert outside.sum() <= 7
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsmooth_spark",
            "query",
            "--release",
            str(out),
            "--points",
            "[[14, 19], [20, 25]]",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["values"] == pytest.approx(
        release.evaluate(np.array([[14, 19], [20, 25]])).tolist()
    )
    for bad, message in (
        ("[[14]]", "2 coordinates"),
        ("not json", "JSON list"),
        ("[[1, NaN]]", ""),
    ):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "dpsmooth_spark",
                "query",
                "--release",
                str(out),
                "--points",
                bad,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    # a retry reuses the persisted lattice: same values, no new budget
    again = BernsteinRelease.load(run_release_function(parse_config(raw), quiet=True).output_path)
    np.testing.assert_array_equal(again.values, release.values)


def test_svm_release_job(spark, tmp_path, wdbc_config_dict):
    raw = config(
        tmp_path,
        wdbc_config_dict,
        privacy={"epsilon": 1.0, "delta": 1e-6},
        bernstein={"function": "svm", "label": "malignant", "k": 4, "h": 2, "oracle_max_rows": 200},
    )
    report = run_release_function(parse_config(raw), quiet=True)
    manifest = report.manifest
    details = manifest["mechanism"]["details"]
    assert details["sample_rate"] < 1  # 200 of ~569 rows
    assert manifest["mechanism"]["sensitivity_per_point"] == pytest.approx(2 * 1.0 / details["N"])
    stages = {s["stage"]: s for s in manifest["privacy"]["accounting"]["stages"]}
    assert (
        stages["lattice"]["mechanism"] == "laplace_zcdp" and stages["lattice"]["invocations"] == 25
    )
    assert manifest["privacy"]["accounting"]["epsilon_spent"] <= 1.0 + 1e-9


def test_distance_release_job(spark, tmp_path, wdbc_config_dict, wdbc_table):
    names = ["mean_radius", "mean_texture", "malignant"]
    raw = config(tmp_path, wdbc_config_dict, privacy={"epsilon": 10.0}, distance={"metric": "l1"})
    report = run_release_distances(parse_config(raw), quiet=True)
    out = Path(report.output_path)
    release = DistanceRelease.load(out)
    x = data(wdbc_table, names)
    q = np.array([[14.0, 19.0, 0.0], [20.0, 25.0, 1.0], [8.0, 35.0, 0.5]])
    truth = np.abs(x[None] - q[:, None]).sum(axis=2).mean(axis=1)
    widths = np.array([hi - lo for lo, hi in COLUMNS.values()])
    assert np.all(np.abs(release.answer(q) - truth) <= 3 * release.alpha * widths.sum())
    manifest = report.manifest
    assert manifest["mechanism"]["name"] == "distance_queries"
    assert [s["stage"] for s in manifest["privacy"]["accounting"]["stages"]] == [
        "count",
        "sparse_vector",
        "tangents",
    ]
    assert manifest["privacy"]["accounting"]["epsilon_spent"] == pytest.approx(10.0)


def test_bourgain_release_job_with_a_query_file(spark, tmp_path, wdbc_config_dict, wdbc_table):
    queries = tmp_path / "queries.parquet"
    pq.write_table(wdbc_table.select(list(COLUMNS)).slice(0, 20), queries)
    raw = config(
        tmp_path,
        wdbc_config_dict,
        privacy={"epsilon": 10.0},
        distance={"metric": "bourgain", "queries": str(queries), "bourgain_repeats": 2},
    )
    release = DistanceRelease.load(run_release_distances(parse_config(raw), quiet=True).output_path)
    assert release.embedding.dim == 2 * 5  # ceil(log2 20) levels x K
    answers = release.answer(data(wdbc_table, list(COLUMNS))[:20])
    assert np.all((answers >= 0) & (answers <= 1))  # distances on the unit-diameter cube
    with pytest.raises(ConfigError, match="queries"):
        parse_config(config(tmp_path, wdbc_config_dict, distance={"metric": "bourgain"}))
