"""Refusals say nothing of the data and are charged once noise is drawn (docs/privacy.md 2):
the error, retry and row-check paths of a release."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.mechanisms.stages import PlanError
from dpsmooth_spark.pipeline.row_checks import InvalidDataError
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.privacy.ledger import BudgetLedger, ReleaseRefusedError
from tests.spark.test_job import assert_nothing_written, small_config

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]

SENTINELS = {
    "f": 987654.321,
    "i": 8675309,
    "ts": 1700000000123456789,  # nanoseconds: the safe cast to microseconds would quote it
    "d": dt.date(2061, 7, 28),
    "s": "ZEBRASENTINEL",
}
"""One row's values, each outside its column's bounds or domain, in every column kind."""
SENTINEL_TEXT = ("987654", "8675309", "123456789", "2061-07-28", "2061", "ZEBRASENTINEL")


def _sentinel_table(n: int = 200, nanos: bool = True) -> pa.Table:
    """``n`` ordinary rows and one of :data:`SENTINELS` (its string a null under ``nulls``)."""
    base_ts = 1_690_000_000 * 10**9
    ts = [base_ts + i * 10**9 for i in range(n)] + [SENTINELS["ts"]]
    return pa.table(
        {
            "f": pa.array([0.5] * n + [SENTINELS["f"]]),
            "i": pa.array([5] * n + [SENTINELS["i"]], pa.int64()),
            "ts": pa.array(ts, pa.timestamp("ns" if nanos else "us")),
            "d": pa.array([dt.date(2020, 1, 1)] * n + [SENTINELS["d"]], pa.date32()),
            "s": pa.array(["a", "b"] * (n // 2) + [SENTINELS["s"]]),
        }
    )


def _sentinel_config(tmp_path: Path, **changes) -> Path:
    config = {
        "input": {"path": str(tmp_path / "input.parquet")},
        "columns": [
            {"name": "f", "lower": 0, "upper": 1},
            {"name": "i", "lower": 0, "upper": 10},
            {"name": "ts", "lower": "2023-01-01T00:00:00", "upper": "2024-01-01T00:00:00"},
            {"name": "d", "lower": "2019-01-01", "upper": "2021-01-01"},
            {"name": "s", "values": ["a", "b"]},
        ],
        "privacy": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "mechanism": {"candidates": 200},
    }
    for key, value in changes.items():
        section, _, name = key.partition(".")
        config[section] = value if not name else {**config[section], name: value}
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dpsmooth_spark", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


REFUSED = {
    # name: (nanosecond timestamps, config changes, the refusal's words)
    "invalid-rows": (True, {}, "some rows have a null"),
    "clamped-rows": (
        True,
        {
            "input.on_invalid": "drop",  # the sentinel row is dropped; every other clamped
            "columns": [
                {"name": "f", "lower": 0, "upper": 1},
                {"name": "ts", "lower": "2025-01-01T00:00:00", "upper": "2026-01-01T00:00:00"},
                {"name": "s", "values": ["a", "b"]},
            ],
        },
        "lie outside the public bounds",
    ),
    "after-noise": (  # an auto domain that selects nothing: refused after its noise
        False,
        {
            "columns": [
                {"name": "f", "lower": 0, "upper": 1},
                {"name": "s", "values": "auto", "other": "zz"},
            ],
            "privacy": {"epsilon": 0.05, "delta": 1e-6},
            "input.max_clamped_fraction": 1.0,
        },
        "no value's noisy count cleared",
    ),
}
"""Releases of a table with a row of sentinel values that are refused: before their noise
(invalid rows; too many clamped), and after it."""

RUN_COMMANDS = """
import json, sys
from dpsmooth_spark.cli import main
print("exit codes", json.dumps([main(args) for args in json.loads(sys.argv[1])]))
"""
"""The CLI's commands, one after another in one process, each as ``python -m dpsmooth_spark``
runs it: one Python and JVM start-up (most of a refused run's 24 s here) for all of them."""


def test_no_record_value_or_exact_count_leaves_a_refused_release(tmp_path):
    """A row of sentinel values (float, int, nanosecond timestamp, date, string) in a table whose
    release is refused (:data:`REFUSED`), each through ``synthesize`` of the CLI: none of them,
    and no count of rows, appears in stdout, stderr (Spark's logs included) or any file the
    releases leave; nothing is written; each exits with 2 and says why. ``python -m
    dpsmooth_spark ledger`` lists the release refused after its noise, with its epsilon."""
    configs = {}
    for name, (nanos, changes, _) in REFUSED.items():
        folder = tmp_path / name
        folder.mkdir()
        pq.write_table(_sentinel_table(nanos=nanos), folder / "input.parquet")
        configs[name] = str(_sentinel_config(folder, **changes))
    commands = [
        ["synthesize", "--config", config, "--release-id", f"refused-{name}"]
        for name, config in configs.items()
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_COMMANDS, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"exit codes {[2] * len(REFUSED)}" in proc.stdout, out[-3000:]
    for name, (_, _, expected) in REFUSED.items():
        assert expected in out, name
        _assert_said_nothing(out, tmp_path / name)
    listing = _cli("ledger", "--config", configs["after-noise"]).stdout
    assert not any(text in listing for text in SENTINEL_TEXT)
    row = next(line for line in listing.splitlines() if "refused-after-noise" in line)
    assert "refused" in row and "0.05" in row


def _assert_said_nothing(out: str, folder: Path) -> None:
    for text in SENTINEL_TEXT:
        assert text not in out, text
    for count in ("201", "200"):  # the table's rows, kept or read
        assert f" {count} " not in out and f"{count} row" not in out
    assert not (folder / "release").exists()
    assert not list(folder.glob(".release*"))


def test_a_refusal_after_the_count_is_charged_and_a_retry_repeats_it(spark, tmp_path, monkeypatch):
    """A plan refused on the noisy count (forced here: the plan raises after the count is
    drawn) records the release's epsilon in the ledger before the error leaves the job; the
    retry with the same release id draws nothing and repeats the refusal."""
    table = pa.table({"a": np.linspace(0, 1, 300), "b": np.linspace(-1, 1, 300)})
    config = parse_config({**small_config(tmp_path, table), "release_id": "r1"})

    def refused(*args, **kwargs):
        raise PlanError("the plan is refused on the noisy count")

    monkeypatch.setattr(
        "dpsmooth_spark.mechanisms.synthesizer.measure.plan_budget", refused, raising=True
    )
    with pytest.raises(PlanError):
        run_synthesize(config, quiet=True)
    ledger = BudgetLedger(config.ledger_path)
    entry = ledger.find("r1")
    assert entry is not None and entry.epsilon == 1.0
    assert entry.refusal is not None and "refused on the noisy count" in entry.refusal
    assert [s["stage"] for s in entry.accounting["stages"]] == ["count", "count_top_up"]
    assert "refused" in ledger.format(config.table_id)
    monkeypatch.undo()
    with pytest.raises(ReleaseRefusedError, match="refused after its noise was drawn"):
        run_synthesize(config, quiet=True)
    assert ledger.spent(config.table_id)[0] == 1.0
    assert_nothing_written(tmp_path)


def test_psi_fractions_that_cannot_fit_are_refused_before_any_noise(spark, tmp_path):
    """``candidate_strategy: psi`` with fractions that leave the basis no budget is a config
    error: nothing reaches the ledger (before, the noisy count decided, and the refusal was not
    charged)."""
    table = pa.table({"a": np.linspace(0, 1, 300), "b": np.linspace(-1, 1, 300)})
    raw = small_config(tmp_path, table)
    raw["mechanism"] = {
        "candidate_strategy": "psi",
        "psi_fraction": 0.3,
        "directions_fraction": 0.2,
    }
    config = parse_config(raw)
    with pytest.raises(PlanError, match="Nothing was spent"):
        run_synthesize(config, quiet=True)
    assert BudgetLedger(config.ledger_path).spent(config.table_id) == (0, 0)


def test_rows_with_nulls_count_as_kept_in_the_clamping_check(spark, tmp_path):
    """A row with a null in a nullable column and a value outside its bounds is a kept, clamped
    row: at max_clamped_fraction 1.0 the release goes on (it was refused as "2 of 1 rows")."""
    table = pa.table({"a": [5.0] * 100, "b": pa.array([None, 0.1] * 50, pa.float64())})
    raw = small_config(tmp_path, table)
    raw["columns"][1]["nullable"] = True
    raw["input"]["max_clamped_fraction"] = 1.0
    report = run_synthesize(parse_config(raw), quiet=True)
    assert report.manifest["output"]["rows"] >= 1


def test_auto_domains_check_rows_before_their_noise(spark, tmp_path):
    """Invalid rows beside an auto bound are refused before the domains' noise: nothing is
    charged, so a retry has nothing to repeat (the check ran on the found bounds after the
    noise, uncharged)."""
    table = pa.table({"a": [0.5, None] * 100, "b": np.linspace(-1, 1, 200)})
    raw = small_config(tmp_path, table)
    raw["columns"][0] = {"name": "a", "lower": "auto", "upper": "auto", "range": [0, 10]}
    config = parse_config(raw)
    with pytest.raises(InvalidDataError, match="some rows"):
        run_synthesize(config, quiet=True)
    assert BudgetLedger(config.ledger_path).spent(config.table_id) == (0, 0)
