"""One local SparkSession for every Spark test module: a JVM takes ~10 s and ~400 MiB to start.

Not a conftest.py (test directories have no __init__.py, so a second conftest would shadow the
top one's helpers): each Spark test module defines a session fixture that calls
:func:`spark_session`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import uuid
from typing import Any

import pytest
from conftest import IN_CI

import pgqueue

# C1 compilation only and the serial collector: about a third less JVM start-up, and the tests'
# data is too small for C2 or a parallel GC to pay off.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Two cores, and each task may fail three times before its job does (plain local[2] never
# retries, which the retry tests need).
MASTER = "local[2,4]"

_session: Any = None


def spark_session() -> Any:
    """The shared SparkSession (skipped, or failed in CI, without Java or pyspark)."""
    global _session
    if _session is None:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            if IN_CI:
                pytest.fail("the Spark tests need a Java runtime when CI=true")
            pytest.skip("Spark needs a Java runtime (apt-get install openjdk-17-jre-headless)")
        from pgqueue.contrib.spark import local_session

        _session = local_session(
            MASTER,
            app_name="pgqueue-tests",
            conf={
                "spark.driver.extraJavaOptions": JVM_OPTIONS,
                "spark.sql.shuffle.partitions": 2,
                "spark.ui.showConsoleProgress": "false",
            },
        )
        _session.sparkContext.setLogLevel("ERROR")
        atexit.register(_session.stop)
    return _session


def migrated_postgres(pg_server: Any, prefix: str) -> str:
    """A new, migrated database on the session's PostgreSQL server; returns its URL."""
    url: str = pg_server.create_database(f"{prefix}_{uuid.uuid4().hex[:8]}")
    queue = pgqueue.Queue(url)
    queue.migrate()
    queue.close()
    return url
