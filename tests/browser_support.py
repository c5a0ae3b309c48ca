"""Headless Chromium for the dashboard's browser tests: Debian's chromium and chromium-driver,
driven by Selenium (nothing downloaded at run time).

Without the browser the tests skip, except with ``CI=true`` where they fail: scripts/test.sh
installs both packages when it runs as root.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = os.environ.get("PGQUEUE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PGQUEUE_CHROMEDRIVER", "/usr/bin/chromedriver")
IN_CI = os.environ.get("CI", "").lower() == "true"

# Chromium as root in a container: no sandbox, no GPU, and nothing that phones home.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
    "--force-device-scale-factor=1",
)


def require_browser() -> None:
    """Skip (or, in CI, fail) when Chromium or its driver is missing."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        reason = f"no browser for the dashboard tests: {', '.join(missing)} missing"
        if IN_CI:
            pytest.fail(reason + " (scripts/test.sh installs chromium and chromium-driver)")
        pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium WebDriver with a fresh profile, quit afterwards."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="pgqueue-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served on a free loopback port in a thread; yields its base URL."""
    from pgqueue.dashboard.server import make_dashboard_server

    server = make_dashboard_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
