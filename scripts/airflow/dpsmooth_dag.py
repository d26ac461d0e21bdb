"""Example Airflow DAG: a weekly DP release of a lake table, then its evaluation report.

Retries are safe: the release id is the DAG run id, so a retried ``synthesize`` task reuses the
noisy statistics the first attempt persisted in the budget ledger instead of spending budget
again (docs/reliability.md). Build the ``--py-files`` archive with ``scripts/package``.

Set the paths through the environment of the Airflow workers (or edit the defaults):
``DPSMOOTH_HOME`` (a checkout or install with ``jobs/``), ``DPSMOOTH_CONFIG``,
``DPSMOOTH_OUTPUT`` (a folder; one release per run is written below it).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

HOME = os.environ.get("DPSMOOTH_HOME", "/opt/dpsmooth-spark")
CONFIG = os.environ.get("DPSMOOTH_CONFIG", f"{HOME}/conf/examples/wdbc.yaml")
OUTPUT = os.environ.get("DPSMOOTH_OUTPUT", "/lake/synthetic/wdbc")
PY_FILES = f"{HOME}/dist/dpsmooth_spark.zip"
RELEASE = OUTPUT + "/{{ ds_nodash }}"
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "200",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    "spark.ui.showConsoleProgress": "false",
}


def spark_job(task_id: str, script: str, args: list[str]) -> SparkSubmitOperator:
    """A ``spark-submit`` of one of the project's jobs with the shared archive and settings."""
    return SparkSubmitOperator(
        task_id=task_id,
        application=f"{HOME}/jobs/{script}",
        py_files=PY_FILES,
        conf=SPARK_CONF,
        name=f"dpsmooth-{task_id}-{{{{ ds_nodash }}}}",
        application_args=args,
    )


with DAG(
    dag_id="dpsmooth_release",
    description="Differentially private synthetic copy of a lake table (dpsmooth-spark)",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=10)},
    tags=["privacy", "synthetic-data"],
) as dag:
    synthesize = spark_job(
        "synthesize",
        "synthesize.py",
        ["--config", CONFIG, "--release-id", "{{ run_id }}", "--set", f"output.path={RELEASE}"],
    )
    evaluate = spark_job(
        "evaluate",
        "evaluate.py",
        ["--config", CONFIG, "--synthetic", RELEASE, "--out", RELEASE + "_report"],
    )
    synthesize >> evaluate
