"""A real standalone cluster on this machine (``scripts/cluster``: a master and two workers in
their own JVMs) running the job as users submit it: ``spark-submit --master spark://...`` with
the ``--py-files`` archive of ``scripts/package``. Under a fixed test seed the release equals the
local one row for row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from tests.conftest import free_port

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, CLUSTER_PORT=str(free_port()))
    start = subprocess.run(
        [str(ROOT / "scripts" / "cluster"), "start", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        assert start.returncode == 0, start.stderr[-3000:]
        yield start.stdout.strip().splitlines()[-1], folder
    finally:
        subprocess.run(
            [str(ROOT / "scripts" / "cluster"), "stop", str(folder)],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )


def test_spark_submit_to_a_standalone_cluster_equals_the_local_release(
    spark, cluster, tmp_path, wdbc_config_dict
):
    url, folder = cluster
    assert url.startswith("spark://127.0.0.1:")
    package = subprocess.run(
        [str(ROOT / "scripts" / "package"), str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert package.returncode == 0, package.stderr[-3000:]
    data = dict(
        wdbc_config_dict,
        # five features and the label: the submission is under test, not the fit, which takes
        # 20 s of each run on all 31 columns
        columns=wdbc_config_dict["columns"][:5] + wdbc_config_dict["columns"][-1:],
        seed=17,
        test_mode=True,
        ledger={"path": str(tmp_path / "ledger.sqlite")},
        output={"path": str(tmp_path / "cluster"), "sampling": "executors", "partitions": 4},
    )
    config = tmp_path / "release.yaml"
    config.write_text(yaml.safe_dump(data))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            url,
            "--py-files",
            str(tmp_path / "dist" / "dpsmooth_spark.zip"),
            str(ROOT / "jobs" / "synthesize.py"),
            "--config",
            str(config),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the work ran on the workers' executors, not in a local driver
    executors = [p for p in folder.glob("work-*/app-*/*") if p.is_dir()]
    assert len(executors) >= 2, sorted(folder.rglob("*"))[:20]

    local = dict(
        data,
        output={**data["output"], "path": str(tmp_path / "local")},
        ledger={"path": str(tmp_path / "local.sqlite")},
    )
    run_synthesize(parse_config(local), quiet=True)
    ours, theirs = (pq.read_table(tmp_path / name / "data") for name in ("cluster", "local"))
    assert ours.num_rows > 500
    assert ours.sort_by("mean_radius").equals(theirs.sort_by("mean_radius"))
