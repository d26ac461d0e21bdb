"""A release never destroys its own input: every way an output can overlap the input is refused
before anything is read, spent or written, and the input stays byte-for-byte the same.

The tests run the real CLI with a live Spark session, so a check that let a case through would
run the job and overwrite the input (the tests would then fail on the input's bytes).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import write_deltalake

from dpsmooth_spark.cli import main

pytestmark = pytest.mark.spark


def rows(n: int = 300) -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({"a": rng.uniform(0, 1, n), "b": rng.uniform(-1, 1, n)})


def fingerprint(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (or of ``root`` itself), by relative path."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {
        str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files
    }


def write_config(tmp_path: Path, input_: dict, output: dict, **extra) -> Path:
    data = {
        "input": input_,
        "columns": [{"name": "a", "lower": 0, "upper": 1}, {"name": "b", "lower": -1, "upper": 1}],
        "privacy": {"epsilon": 1.0},
        "output": {"mode": "overwrite", "rows": 100, **output},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "mechanism": {"candidates": 200},
        "seed": 1,
        "test_mode": True,
        **extra,
    }
    path = tmp_path / "conf" / "release.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A Parquet table folder ``lake/patients`` with two files and a symlink to it."""
    table = tmp_path / "lake" / "patients"
    table.mkdir(parents=True)
    pq.write_table(rows().slice(0, 150), table / "part-0.parquet")
    pq.write_table(rows().slice(150), table / "part-1.parquet")
    (tmp_path / "alias").symlink_to(table)
    return table


OUTPUTS = {
    "same-folder": lambda t: str(t),
    "trailing-slash": lambda t: f"{t}/",
    "parent": lambda t: str(t.parent),
    "grandparent": lambda t: str(t.parent.parent),
    "child": lambda t: str(t / "synthetic"),
    "dot-dot": lambda t: f"{t.parent}/x/../patients/",
    "symlink": lambda t: str(t.parent.parent / "alias"),
    "child-via-symlink": lambda t: str(t.parent.parent / "alias" / "synth"),
}


@pytest.mark.parametrize("spelling", list(OUTPUTS))
def test_output_overlapping_a_parquet_input_is_refused(spark, tmp_path, lake, spelling, capsys):
    before = fingerprint(lake.parent)
    config = write_config(tmp_path, {"path": str(lake)}, {"path": OUTPUTS[spelling](lake)})
    assert main(["synthesize", "--config", str(config), "--quiet"]) == 2
    assert "overlaps the input" in capsys.readouterr().err
    assert fingerprint(lake.parent) == before
    assert not (tmp_path / "ledger.sqlite").exists()  # nothing spent, not even a ledger opened


def test_relative_output_resolving_to_the_input_is_refused(spark, tmp_path, lake, capsys):
    """Relative paths resolve against the config file's folder (``tmp/conf``)."""
    before = fingerprint(lake.parent)
    config = write_config(tmp_path, {"path": "../lake/patients"}, {"path": "../lake/./patients"})
    assert main(["synthesize", "--config", str(config), "--quiet"]) == 2
    assert "overlaps the input" in capsys.readouterr().err
    assert fingerprint(lake.parent) == before


def test_a_single_file_input_and_its_folder(spark, tmp_path, capsys):
    source = tmp_path / "data" / "patients.parquet"
    source.parent.mkdir()
    pq.write_table(rows(), source)
    before = fingerprint(source.parent)
    for output in (source.parent, source):
        config = write_config(tmp_path, {"path": str(source)}, {"path": str(output)})
        assert main(["summarize", "--config", str(config), "--quiet"]) == 2
    assert fingerprint(source.parent) == before


def test_same_delta_table_is_refused(spark, tmp_path, capsys):
    table = tmp_path / "delta" / "patients"
    write_deltalake(str(table), rows())
    before = fingerprint(table)
    config = write_config(
        tmp_path, {"path": str(table), "format": "delta"}, {"path": f"{table}/", "format": "delta"}
    )
    assert main(["synthesize", "--config", str(config), "--quiet"]) == 2
    assert "overlaps the input" in capsys.readouterr().err
    assert fingerprint(table) == before


def test_same_iceberg_table_is_refused(spark, tmp_path, capsys):
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    catalog = {"uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(warehouse)}
    ice = SqlCatalog("dpsmooth", **catalog)
    ice.create_namespace("clinic")
    ice.create_table("clinic.patients", rows().schema).append(rows())
    before = fingerprint(warehouse)
    location = {"path": "clinic.patients", "format": "iceberg", "catalog": catalog}
    config = write_config(tmp_path, location, location)
    assert main(["synthesize", "--config", str(config), "--quiet"]) == 2
    assert "overlaps the input Iceberg table 'clinic.patients'" in capsys.readouterr().err
    # a Parquet output written into the Iceberg table's data folder is the same mistake
    config = write_config(
        tmp_path, location, {"path": str(warehouse / "clinic" / "patients" / "x")}
    )
    assert main(["synthesize", "--config", str(config), "--quiet"]) == 2
    assert fingerprint(warehouse) == before


def test_output_containing_the_ledger_is_refused(spark, tmp_path, lake, capsys):
    release = tmp_path / "releases"
    release.mkdir()
    (release / "ledger.sqlite").write_bytes(b"ledger bytes")
    config = write_config(
        tmp_path,
        {"path": str(lake)},
        {"path": str(release)},
        ledger={"path": str(release / "ledger.sqlite")},
    )
    assert main(["synthesize", "--config", str(config), "--quiet"]) == 2
    assert "ledger" in capsys.readouterr().err
    assert (release / "ledger.sqlite").read_bytes() == b"ledger bytes"


def test_evaluation_report_into_the_input_is_refused(spark, tmp_path, lake, capsys):
    before = fingerprint(lake.parent)
    config = write_config(tmp_path, {"path": str(lake)}, {"path": str(tmp_path / "release")})
    code = main(
        [
            "evaluate",
            "--config",
            str(config),
            "--synthetic",
            str(lake),
            "--out",
            str(lake),
            "--quiet",
        ]
    )
    assert code == 2 and "report folder" in capsys.readouterr().err
    assert fingerprint(lake.parent) == before


def test_a_sibling_with_a_common_prefix_is_not_an_overlap(spark, tmp_path, lake):
    config = write_config(tmp_path, {"path": str(lake)}, {"path": f"{lake}_synthetic"})
    assert main(["summarize", "--config", str(config), "--quiet"]) == 0
    assert (lake.parent / "patients_synthetic" / "manifest.json").exists()
