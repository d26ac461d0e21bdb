"""Shared fixtures: the bundled WDBC sample and a session-scoped local Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WDBC_CONFIG = ROOT / "conf" / "examples" / "wdbc.yaml"


LONGEST_FILES = (
    "test_privacy_audit.py",
    "test_connect.py",
    "test_relations.py",
    "test_cluster.py",
)
"""The suite's longest files (1.5 to 4 minutes each, one process), run first: pytest-xdist gives
each file to one worker, and a long file handed out last keeps the other worker idle."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files keep order


@pytest.fixture(scope="session")
def wdbc_config_dict() -> dict:
    """The example config as a mapping (paths resolved as ``load_config`` resolves them)."""
    from dpsmooth_spark.config import resolve_paths

    return resolve_paths(yaml.safe_load(WDBC_CONFIG.read_text()), WDBC_CONFIG.parent)


@pytest.fixture(scope="session")
def wdbc_bounds(wdbc_config_dict) -> dict[str, tuple[float, float]]:
    """Bounds of the WDBC columns as floats (the 0/1 label, declared by its values, on [0, 1])."""
    return {
        c["name"]: (c.get("lower", 0.0), c.get("upper", 1.0)) for c in wdbc_config_dict["columns"]
    }


@pytest.fixture(scope="session")
def wdbc_table():
    return pq.read_table(ROOT / "data" / "wdbc.parquet")


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole run (2 cores, one task retry, UI off, WARN logs).
    A session an earlier test started through the library (``local[*]``, no retry) is stopped
    first: the retry tests need this one, whatever ran before them in this process."""
    from pyspark.sql import SparkSession

    from dpsmooth_spark.spark.session import get_session

    active = SparkSession.getActiveSession()
    if active is not None and active.sparkContext.master != "local[2,2]":
        active.stop()
    session = get_session(
        "local[2,2]", {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
    )
    yield session
    session.stop()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float, log: Path | None = None) -> None:
    """Block until something listens on 127.0.0.1:``port`` (fail with the log's tail)."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    tail = "".join(p.read_text()[-3000:] for p in (log.glob("*") if log else []))
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s\n{tail}")


def spark_env(tmp: Path) -> dict[str, str]:
    """Environment for pyspark's own scripts (sbin/, bin/) with this interpreter as Python."""
    import os
    import sys

    import pyspark

    return dict(
        os.environ,
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_PID_DIR=str(tmp / "pids"),
        SPARK_IDENT_STRING=f"dpsmooth-test-{os.getpid()}",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A real Spark Connect server (pyspark's ``sbin/start-connect-server.sh --master local[2]``)
    bound to 127.0.0.1 on a free port; yields its ``sc://`` URL and stops it at the end."""
    import subprocess

    from dpsmooth_spark.spark.session import LOG4J

    tmp = tmp_path_factory.mktemp("connect")
    env = spark_env(tmp)
    port = free_port()
    sbin = Path(env["SPARK_HOME"]) / "sbin"
    subprocess.run(
        [
            str(sbin / "start-connect-server.sh"),
            "--master",
            "local[2]",
            "--driver-memory",
            "1g",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--conf",
            f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{LOG4J}",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )  # the daemon inherits pipes: capturing them would wait for it
    try:
        wait_for_port(port, 120, tmp / "logs")
        yield f"sc://127.0.0.1:{port}"
    finally:
        # a client session left open would try to release itself at exit, against a stopped
        # server, retrying for minutes
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        for client in {ConnectSession.getActiveSession(), ConnectSession._default_session} - {None}:
            client.stop()
        subprocess.run(
            [str(sbin / "stop-connect-server.sh")],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
