#!/usr/bin/env bash
# The Django tests once more on Python 3.12 with Django 6 and its native django.tasks (the main
# run, on Python 3.11, covers Django 5.2 with the django-tasks backport). scripts/test.sh calls
# this at its end. Needs a Python 3.12 (pyenv's is found even without its shims on PATH); without
# one it skips, except in CI, where it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV_DJANGO6:-.venv-django6}
PYTHON312=${PYTHON312:-}
if [ -z "$PYTHON312" ]; then
    # pyenv's own builds first: its shim on PATH may exist and still refuse to run 3.12.
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
        /root/.pyenv/versions/3.12*/bin/python3.12 "$(command -v python3.12 || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c '' 2>/dev/null; then
            PYTHON312=$candidate
            break
        fi
    done
fi
if [ -z "$PYTHON312" ]; then
    if [ "${CI:-}" = "true" ]; then
        echo "test-django6: no Python 3.12 found (set PYTHON312)" >&2
        exit 1
    fi
    echo "test-django6: skipped, no Python 3.12 found (set PYTHON312)"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON312" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# Only what the Django tests need (the dev extra's linters and docs tools run in the main venv).
"$VENV/bin/python" -m pip install --quiet -e '.[postgres,django,flask]' \
    'pytest>=8' 'pytest-timeout>=2.3' 'testing.postgresql>=1.3'
"$VENV/bin/python" -c 'import django, django.tasks; print("== pytest: Django", django.__version__)'
"$VENV/bin/python" -m pytest tests/contrib/test_django_*.py -q "$@"
