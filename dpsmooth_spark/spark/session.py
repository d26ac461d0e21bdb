"""A SparkSession with defaults that work on a laptop and stay out of the way on a cluster, or a
Spark Connect client session when a remote is configured."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, cast

from pyspark.sql import SparkSession

LOG4J = Path(__file__).with_name("log4j2.properties")
CONNECT_CONF = {"spark.sql.session.timeZone": "UTC"}
"""What a Connect session sets on the server (runtime settings only: the server owns the rest)."""


def get_session(
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    app_name: str = "dpsmooth-spark",
    remote: str | None = None,
) -> SparkSession:
    """Return the active session or build one.

    With a remote (``remote``, else ``conf['spark.remote']``, else the ``SPARK_REMOTE``
    environment variable, e.g. ``sc://host:15002``) the session is a Spark Connect client and
    sets no master. Under ``spark-submit`` the submitted master and settings win; locally the
    executors use the running interpreter, bind to 127.0.0.1, log at WARN and run without the UI.
    """
    conf = dict(conf or {})
    remote = remote or conf.pop("spark.remote", None) or os.environ.get("SPARK_REMOTE")
    if remote:  # the Connect builder itself: a classic session may run beside it (the tests)
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        remote_builder = ConnectSession.builder.remote(remote).appName(app_name)
        for key, value in {**CONNECT_CONF, **conf}.items():
            remote_builder = remote_builder.config(key, value)
        # the Connect session implements the classic session's DataFrame API, which is all we use
        return cast(SparkSession, remote_builder.getOrCreate())
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # inside a --py-files zip the file has no path of its own: then Spark's default logging
    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J}" if LOG4J.is_file() else ""
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.debug.maxToStringFields", "1000")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
    )
    if not launched_by_spark_submit():
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def session_for(config: Any) -> SparkSession:
    """The session a config's ``spark`` section (``SparkConfig``) asks for."""
    return get_session(config.master, config.conf, remote=config.remote)


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect client session (no SparkContext, no RDD API)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: SparkSession) -> int:
    """The cluster's default parallelism, also through Spark Connect (where it is read from the
    configuration, or counted as the partitions of a range)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return int(configured)
    ids = spark.range(0, 1 << 16).selectExpr("spark_partition_id() AS partition")
    last = ids.selectExpr("max(partition)").first()
    return int(last[0]) + 1 if last is not None and last[0] is not None else 1


SIDE_CHANNELS = {
    "spark.ui.enabled": ("true", "the Spark UI shows exact row counts of every stage"),
    "spark.eventLog.enabled": ("false", "the event log keeps exact row counts of every stage"),
}
"""Settings under which the session shows more of the input than the release does
(docs/privacy.md section 12): Spark's default for each, and why."""


def side_channel_warnings(get: Any) -> list[str]:
    """What a release says of its session's side channels: a warning per setting of
    :data:`SIDE_CHANNELS` that ``get(key, default)`` reads as on (unset: Spark's default; a
    setting a Connect server does not expose counts as off)."""
    out = []
    for key, (default, why) in SIDE_CHANNELS.items():
        try:
            value = get(key, default)
        except Exception:  # a Connect server that does not expose the setting
            continue
        if str(value).strip().lower() == "true":
            out.append(
                f"{key} is on: {why}; restrict it to those entitled to the raw table, or set it "
                "to false for the job (docs/privacy.md section 12)"
            )
    return out


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands the Python driver its gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
