"""Shared fixtures: the bundled WDBC sample and a session-scoped local Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WDBC_CONFIG = ROOT / "conf" / "examples" / "wdbc.yaml"


@pytest.fixture(scope="session")
def wdbc_config_dict() -> dict:
    """The example config as a mapping (paths resolved as ``load_config`` resolves them)."""
    from dpsmooth_spark.config import resolve_paths

    return resolve_paths(yaml.safe_load(WDBC_CONFIG.read_text()), WDBC_CONFIG.parent)


@pytest.fixture(scope="session")
def wdbc_bounds(wdbc_config_dict) -> dict[str, tuple[float, float]]:
    return {c["name"]: (c["lower"], c["upper"]) for c in wdbc_config_dict["columns"]}


@pytest.fixture(scope="session")
def wdbc_table():
    return pq.read_table(ROOT / "data" / "wdbc.parquet")


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole run (2 cores, one task retry, UI off, WARN logs)."""
    from dpsmooth_spark.spark.session import get_session

    session = get_session("local[2,2]", {"spark.sql.shuffle.partitions": "2",
                                       "spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
