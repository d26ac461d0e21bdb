"""Reliability of the release job: retries, lifetime budget, crashes, executor faults, leaks."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerConflictError
from dpsmooth_spark.spark.data_pass import exact_sums
from dpsmooth_spark.spark.io import read_table, write_release

pytestmark = pytest.mark.spark


def make_config(tmp_path: Path, rows: int = 300, **extra) -> dict:
    src = tmp_path / "input.parquet"
    if not src.exists():
        rng = np.random.default_rng(5)
        pq.write_table(pa.table({"a": rng.uniform(0, 1, rows), "b": rng.uniform(-1, 1, rows)}), src)
    config = {
        "input": {"path": str(src)},
        "columns": [
            {"name": "a", "lower": 0.0, "upper": 1.0},
            {"name": "b", "lower": -1.0, "upper": 1.0},
        ],
        "privacy": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "mechanism": {"candidates": 200},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
    }
    config.update(extra)
    return config


def files_match_manifest(folder: Path) -> bool:
    import hashlib

    manifest = json.loads((folder / "manifest.json").read_text())
    return all(
        hashlib.sha256((folder / rel).read_bytes()).hexdigest() == digest
        for rel, digest in manifest["content_sha256"].items()
    )


def test_retry_with_same_release_id_reuses_statistics(spark, tmp_path):
    config = make_config(tmp_path, release_id="run-1")
    first = run_synthesize(parse_config(config), quiet=True).manifest
    second = run_synthesize(parse_config(config), quiet=True).manifest  # output exists: own release
    assert first["privacy"]["statistics_reused_from_ledger"] is False
    assert second["privacy"]["statistics_reused_from_ledger"] is True
    summary = json.loads((tmp_path / "release" / "summary.json").read_text())
    stored = BudgetLedger(tmp_path / "ledger.sqlite").find("run-1")
    assert summary["statistics"] == stored.statistics["statistics"]
    assert stored.status == "complete"
    assert second["ledger"]["table_epsilon_spent"] == pytest.approx(1.0)  # spent once
    assert second["privacy"]["accounting"] == first["privacy"]["accounting"]
    # the same id for a different release is refused
    config["privacy"] = {"epsilon": 2.0}
    with pytest.raises(LedgerConflictError):
        run_synthesize(parse_config(config), quiet=True)


def test_lifetime_budget_refuses_before_any_work(spark, tmp_path):
    config = make_config(
        tmp_path, ledger={"path": str(tmp_path / "ledger.sqlite"), "lifetime_epsilon": 1.5}
    )
    run_synthesize(parse_config(config), quiet=True)
    config["output"] = {"path": str(tmp_path / "second")}
    with pytest.raises(BudgetExceededError, match="lifetime budget") as err:
        run_synthesize(parse_config(config), quiet=True)
    assert "smooth_pca" in str(err.value)  # the message shows the ledger
    assert not (tmp_path / "second").exists()
    assert (
        BudgetLedger(tmp_path / "ledger.sqlite").spent(f"parquet:{tmp_path / 'input.parquet'}")[0]
        == 1.0
    )


KILLED_JOB = """
import json, sys, time
import pyarrow.parquet as pq
real = pq.write_table
def slow(*args, **kwargs):
    real(*args, **kwargs)
    print("WRITING", flush=True)
    time.sleep(120)
pq.write_table = slow
from dpsmooth_spark.config import parse_config
from dpsmooth_spark.pipeline.synthesize import run_synthesize
run_synthesize(parse_config(json.loads(sys.argv[1])), quiet=True)
"""


def test_sigkill_during_write_leaves_previous_release_and_consistent_ledger(spark, tmp_path):
    base = make_config(tmp_path, release_id="previous")
    run_synthesize(parse_config(base), quiet=True)
    previous_manifest = (tmp_path / "release" / "manifest.json").read_text()

    killed = dict(base, release_id="killed", output=dict(base["output"], mode="overwrite"))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_JOB, json.dumps(killed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == "WRITING"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)

    # the output path still holds the complete previous release; the partial one is hidden staging
    assert (tmp_path / "release" / "manifest.json").read_text() == previous_manifest
    assert files_match_manifest(tmp_path / "release")
    assert list(tmp_path.glob(".release.staging-*"))
    ledger = BudgetLedger(tmp_path / "ledger.sqlite")
    assert ledger.find("killed").status == "statistics"  # budget counted, release not complete

    # the scheduler's retry finishes the release without new noise and cleans up
    report = run_synthesize(parse_config(killed), quiet=True)
    assert report.manifest["privacy"]["statistics_reused_from_ledger"] is True
    assert ledger.find("killed").status == "complete"
    assert not list(tmp_path.glob(".release.*"))
    assert files_match_manifest(tmp_path / "release")


def test_interrupted_swap_restores_the_previous_release(tmp_path):
    target = tmp_path / "release"
    table = pa.table({"a": [1.0]})
    write_release(str(target), table, {}, {"release_id": "one"}, "error")
    os.rename(target, tmp_path / ".release.old-deadbeef")  # killed between the two renames
    (tmp_path / ".release.staging-cafe").mkdir()
    write_release(str(target), table, {}, {"release_id": "one"}, "error")  # the retry
    assert json.loads((target / "manifest.json").read_text())["release_id"] == "one"
    assert not list(tmp_path.glob(".release.*"))


def test_a_failed_units_table_leaves_the_previous_release(tmp_path):
    """The units table is written in the same staging folder as the rows: a writer that fails
    midway leaves the previous release whole and no staging behind."""
    target = tmp_path / "release"
    write_release(str(target), pa.table({"a": [1.0]}), {}, {"release_id": "one"}, "error")
    before = (target / "manifest.json").read_text()

    def broken(rows: Path, folder: Path) -> None:
        folder.mkdir()
        (folder / "part-0.parquet").write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_release(
            str(target),
            pa.table({"a": [2.0]}),
            {},
            {"release_id": "two"},
            "overwrite",
            None,
            broken,
        )
    assert (target / "manifest.json").read_text() == before
    assert not (target / "units").exists()
    assert not list(tmp_path.glob(".release.*"))


def test_task_failure_and_retry_do_not_change_the_statistics(spark, wdbc_bounds, tmp_path):
    from pyspark import TaskContext

    marker = tmp_path / "fault-injected"

    path = str(Path(__file__).resolve().parents[2] / "data" / "wdbc.parquet")
    bounds = PublicBounds.from_mapping(wdbc_bounds)
    df = read_table(spark, path, "parquet", list(bounds.columns)).repartition(3)
    clean = exact_sums(df, bounds, 2)

    def fail_first_attempt(value):
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and ctx.partitionId() == 1:
            marker.write_text("attempt 0 failed")
            raise RuntimeError("injected executor fault")
        return value

    flaky = df.withColumn("mean_radius", F.udf(fail_first_attempt, "double")("mean_radius"))
    retried = exact_sums(flaky, bounds, 2)
    assert marker.exists()  # the fault really happened and the task was retried
    assert (retried.gram == clean.gram).all()
    assert retried.rows_seen == clean.rows_seen == 569


def test_arrow_reader_task_failure_and_retry_do_not_change_the_statistics(
    spark, wdbc_bounds, tmp_path
):
    """The same for the arrow reader (the default for local Parquet): a task that dies on its first
    attempt after reading is retried by Spark and the exact sums do not change."""
    from pyspark import TaskContext

    from dpsmooth_spark.spark.data_pass import exact_sums_arrow

    marker = tmp_path / "arrow-fault-injected"
    source = tmp_path / "groups.parquet"
    wdbc = pq.read_table(Path(__file__).resolve().parents[2] / "data" / "wdbc.parquet")
    pq.write_table(wdbc, source, row_group_size=100)  # 6 row groups -> several tasks
    bounds = PublicBounds.from_mapping(wdbc_bounds)
    clean = exact_sums_arrow(spark, str(source), bounds, 2)

    def fail_first_attempt() -> None:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and ctx.partitionId() == 1:
            marker.write_text("attempt 0 failed")
            raise RuntimeError("injected executor fault")

    retried = exact_sums_arrow(spark, str(source), bounds, 2, task_hook=fail_first_attempt)
    assert marker.exists()
    assert (retried.gram == clean.gram).all()
    assert retried.rows_seen == clean.rows_seen == 569


SENTINEL = 0.7316492851


def test_no_raw_value_reaches_outputs_or_logs(spark, tmp_path, capfd):
    rng = np.random.default_rng(9)
    a = rng.uniform(0, 1, 500)
    a[123] = SENTINEL
    pq.write_table(pa.table({"a": a, "b": rng.uniform(-1, 1, 500)}), tmp_path / "input.parquet")
    config = make_config(tmp_path, release_id="sentinel")
    run_synthesize(parse_config(config), quiet=False)
    logs = capfd.readouterr()
    needles_text = [repr(SENTINEL), f"{SENTINEL:.8f}", f"{2 * SENTINEL - 1:.8f}"]
    needles_bytes = [struct.pack("<d", SENTINEL), struct.pack("<d", 2 * SENTINEL - 1)]
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "input.parquet"]
    assert any(p.name == "ledger.sqlite" for p in written)
    for path in written:
        blob = path.read_bytes()
        for needle in needles_bytes + [n.encode() for n in needles_text]:
            assert needle not in blob, path
    for needle in needles_text:
        assert needle not in logs.out + logs.err


def test_cli_shows_the_ledger(spark, tmp_path):
    import yaml

    config = make_config(tmp_path, release_id="shown")
    run_synthesize(parse_config(config), quiet=True)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "dpsmooth_spark", "ledger", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "shown" in proc.stdout and "complete" in proc.stdout
