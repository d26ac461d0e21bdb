"""Cluster packaging, CLI overrides and the example Airflow DAG (skipped without Airflow)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cli_set_overrides_config_keys(tmp_path, wdbc_config_dict):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(wdbc_config_dict))
    ledger = tmp_path / "elsewhere" / "ledger.sqlite"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsmooth_spark",
            "ledger",
            "--config",
            str(config),
            "--set",
            f"ledger.path={ledger}",
            "--set",
            "input.table_id=wdbc-v1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wdbc-v1" in proc.stdout and ledger.exists()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsmooth_spark",
            "ledger",
            "--config",
            str(config),
            "--set",
            "privacy.epsilon=-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "privacy.epsilon" in bad.stderr


def test_package_zip_imports_on_its_own(tmp_path):
    dist = tmp_path / "dist"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "package"), str(dist)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    archive = dist / "dpsmooth_spark.zip"
    names = zipfile.ZipFile(archive).namelist()
    assert (
        "dpsmooth_spark/core/kernel.py" in names
        and "dpsmooth_spark/spark/log4j2.properties" in names
    )
    assert list(dist.glob("dpsmooth_spark-*.whl"))
    # what an executor imports, from the zip alone (numpy is the only other need)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dpsmooth_spark.core.kernel as b; "
        "print(b.__file__)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(archive)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0 and "dpsmooth_spark.zip" in run.stdout, run.stderr


def test_airflow_dag_tasks_and_arguments(monkeypatch):
    pytest.importorskip("airflow")
    pytest.importorskip("airflow.providers.apache.spark")
    import importlib.util

    monkeypatch.setenv("DPSMOOTH_HOME", "/opt/dp")
    spec = importlib.util.spec_from_file_location(
        "dpsmooth_dag", ROOT / "scripts" / "airflow" / "dpsmooth_dag.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.dag
    assert dag.dag_id == "dpsmooth_release"
    assert {t.task_id for t in dag.tasks} == {"synthesize", "evaluate"}
    synth = dag.get_task("synthesize")
    assert synth.downstream_task_ids == {"evaluate"}
    assert synth.retries == 3
    args = synth.application_args
    assert args[args.index("--release-id") + 1] == "{{ run_id }}"  # retries reuse the statistics
    assert synth.application == "/opt/dp/jobs/synthesize.py"
    assert synth.py_files == "/opt/dp/dist/dpsmooth_spark.zip"


@pytest.mark.skipif(
    not os.environ.get("DPSMOOTH_AIRFLOW_E2E"),
    reason="opt-in (installs Airflow 3, about 2 minutes): DPSMOOTH_AIRFLOW_E2E=1",
)
def test_example_dag_passes_airflow_dags_test_with_its_default_config():
    proc = subprocess.run(
        [str(ROOT / "scripts" / "airflow" / "dags_test"), "2026-01-05"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "state=success" in proc.stdout + proc.stderr
    release = ROOT / "build" / "airflow" / "releases" / "20260105"
    assert (release / "manifest.json").exists() and (
        release.parent / "20260105_report" / "report.html"
    ).exists()
