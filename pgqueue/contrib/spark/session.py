"""A local SparkSession set up the way pgqueue's Spark pieces need it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

__all__ = ["DEBIAN_JDBC_JAR", "local_session"]

#: Where Debian's ``libpostgresql-jdbc-java`` puts the PostgreSQL JDBC driver.
DEBIAN_JDBC_JAR = "/usr/share/java/postgresql.jar"


def local_session(
    master: str = "local[*]",
    *,
    app_name: str = "pgqueue",
    jdbc_jar: str | None = DEBIAN_JDBC_JAR,
    conf: Mapping[str, Any] | None = None,
) -> SparkSession:
    """A SparkSession on this machine (or the active one), for scripts, notebooks and tests.

    Executors run this same Python (else they may pick another interpreter without pgqueue or
    psycopg), a local master binds to 127.0.0.1, and the PostgreSQL JDBC driver is loaded when
    ``jdbc_jar`` exists, so :func:`read_jobs` can read over JDBC. ``conf`` adds Spark settings.
    ``local[N,F]`` lets each task fail F-1 times before the job does (plain ``local[N]`` never
    retries).

    Example::

        spark = local_session("local[2]")
        jobs = read_jobs(spark, "postgresql://app@db/app")
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if jdbc_jar is not None and Path(jdbc_jar).is_file():
        builder = builder.config("spark.jars", jdbc_jar)
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()
