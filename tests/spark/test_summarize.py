"""The summarize job (Algorithm 1) on local Spark and the answer CLI (Algorithm 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsmooth_spark.config import parse_config, resolve_paths
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.mechanisms.smooth_summary import SmoothSummary, answer, parse_query
from dpsmooth_spark.pipeline.summarize import run_summarize

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def summary_config(tmp_path: Path, **extra) -> dict:
    path = ROOT / "conf" / "examples" / "wdbc_summary.yaml"
    data = resolve_paths(yaml.safe_load(path.read_text()), path.parent)
    data["output"] = {"path": str(tmp_path / "summary")}
    data["ledger"] = {"path": str(tmp_path / "ledger.sqlite")}
    data.update(extra)
    return data


def test_summarize_then_answer(spark, tmp_path, wdbc_table):
    config = summary_config(tmp_path, seed=5, test_mode=True)
    report = run_summarize(parse_config(config), quiet=True)
    out = Path(report.output_path)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "summary.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mechanism"]["name"] == "smooth_summary"
    assert manifest["privacy"]["accounting"]["epsilon_spent"] == pytest.approx(1.0)
    summary = SmoothSummary.load(out)
    assert summary.degree == 3  # ceil(n~^(1/(2d+K))) = ceil(~569^(1/8))

    # the Spark pass computed exactly what the in-memory kernel computes
    bounds = PublicBounds.from_mapping(
        {c["name"]: (c["lower"], c["upper"]) for c in config["columns"]}
    )
    data = np.column_stack([wdbc_table[c].to_numpy() for c in bounds.columns])
    local = partial_sums([data], bounds.lower, bounds.upper, PassSpec(1, 3))
    query = "gaussian(center=[14, 19, 0.1], sigma=8)"
    f = parse_query(query, 3)
    got = answer(summary, f)
    truth = float(f(data).mean())
    assert (
        abs(got.value - truth) <= got.noise_error_bound + 0.05
    )  # noise bound + approximation at t=3
    assert local.count == 569

    proc = subprocess.run(
        [sys.executable, "-m", "dpsmooth_spark", "answer", "--summary", str(out), "--query", query],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["value"] == pytest.approx(got.value)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsmooth_spark",
            "answer",
            "--summary",
            str(out),
            "--query",
            "gaussian(center=[1], sigma=2)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "3 entries" in bad.stderr


def test_summary_refuses_huge_tensor_bases(tmp_path, wdbc_config_dict):
    data = dict(wdbc_config_dict, output={"path": str(tmp_path / "s")})
    with pytest.raises(ValueError, match="t\\^d"):
        run_summarize(parse_config(data), quiet=True)
    assert not (tmp_path / "s").exists()


def test_synthesize_grid_job(spark, tmp_path):
    from dpsmooth_spark.pipeline.synthesize_grid import run_synthesize_grid
    from dpsmooth_spark.privacy.ledger import BudgetLedger

    config = summary_config(tmp_path, seed=2, test_mode=True)
    config["columns"] = config["columns"][:2]
    config["output"]["rows"] = 2000
    report = run_synthesize_grid(parse_config(config), quiet=True)
    manifest = report.manifest
    assert manifest["mechanism"]["name"] == "smooth_grid"
    assert manifest["privacy"]["accounting"]["epsilon_spent"] == pytest.approx(1.0)
    import pyarrow.parquet as pq

    table = pq.read_table(Path(report.output_path) / "data")
    assert table.num_rows == 2000
    # every record is a grid point (in original units)
    radius = table["mean_radius"].to_numpy()
    assert len(np.unique(radius)) <= manifest["mechanism"]["grid_points"]

    # a table too wide for the exact LP is refused, and the count it spent is on the ledger
    wide = summary_config(tmp_path / "wide", release_id="too-wide")
    wide["grid"] = {"max_lp_entries": 1000}
    with pytest.raises(ValueError, match="max_lp_entries"):
        run_synthesize_grid(parse_config(wide), quiet=True)
    assert BudgetLedger(tmp_path / "wide" / "ledger.sqlite").find("too-wide") is not None
    assert not (tmp_path / "wide" / "summary").exists()
