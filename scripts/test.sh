#!/usr/bin/env bash
# The whole test suite, from a fresh clone: venv, install, lint, types, tests.
# README's second command; .ci/run calls exactly this. Works as root (CI) and as a normal user.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e '.[dev]'

# Debian packages the tests use, installed when running as root (CI) and missing; the package
# lists are fetched once, before the first install.
apt_updated=
apt_install() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
    echo "== apt-get install $*"
    if [ -z "$apt_updated" ]; then
        apt-get update -qq || return 1
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The PostgreSQL JDBC driver, for read_jobs' JDBC path in the Spark tests. Without it those tests
# cover the Python data source path only, so failing to install it is not fatal.
if [ ! -f /usr/share/java/postgresql.jar ]; then
    apt_install libpostgresql-jdbc-java ||
        echo "warning: no PostgreSQL JDBC driver; Spark tests read over the Python data source" >&2
fi

# pgbouncer, for the transaction-pooling tests (tests/backends/test_pgbouncer.py); with CI=true
# they fail rather than skip without it, so a failed install shows up there.
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
    apt_install pgbouncer || echo "warning: no pgbouncer; its tests skip (fail with CI=true)" >&2
fi

# Headless Chromium and its WebDriver for the dashboard's browser tests (Debian's packages: no
# browser download at run time). Without them those tests skip, or fail with CI=true.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    apt_install chromium chromium-driver ||
        echo "warning: no chromium; the dashboard's browser tests skip (fail with CI=true)" >&2
fi

echo "== ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "== mypy --strict pgqueue"
"$VENV/bin/mypy" --strict pgqueue

echo "== lint-imports (layers, contrib uses the public API; see [tool.importlinter])"
"$VENV/bin/lint-imports" --no-cache

echo "== mkdocs build --strict"
site_dir=$(mktemp -d)
# Not --quiet: it also hides the warnings that --strict turns into a failure.
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --site-dir "$site_dir"
rm -rf "$site_dir"

echo "== pytest"
"$VENV/bin/python" -m pytest "$@"

echo "== Django 6 and Django 5.2 on Python 3.12: the Django tests again"
bash scripts/test-django-versions.sh
