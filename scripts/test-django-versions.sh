#!/usr/bin/env bash
# The Django tests again on Python 3.12, where the main run (Python 3.11, Django 5.2) cannot go:
#   1. Django 6 with its native django.tasks: every Django test;
#   2. Django 5.2 LTS with the django-tasks backport: the Tasks-framework tests and the example
#      project (the only code that differs between the two is where the Tasks API comes from).
# scripts/test.sh calls this at its end. Needs a Python 3.12 (pyenv's is found even without its
# shims on PATH); without one it skips, except in CI, where it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

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
        echo "test-django-versions: no Python 3.12 found (set PYTHON312)" >&2
        exit 1
    fi
    echo "test-django-versions: skipped, no Python 3.12 found (set PYTHON312)"
    exit 0
fi

# run VENV DJANGO_REQUIREMENT TASKS_MODULE PYTEST_ARGS...
run() {
    local venv=$1 django=$2 tasks_module=$3
    shift 3
    if [ ! -x "$venv/bin/python" ]; then
        "$PYTHON312" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # Only what the Django tests need (the dev extra's linters and docs tools run in the main
    # venv). The django extra alone must bring the Tasks API, whichever Django is installed.
    "$venv/bin/python" -m pip install --quiet -e '.[postgres,django,flask]' "$django" \
        'pytest>=8' 'pytest-timeout>=2.3' 'testing.postgresql>=1.3'
    "$venv/bin/python" -c "
import django, pgqueue.contrib.django.tasks as t
print('== pytest: Django', django.__version__, 'with', t.Task.__module__)
assert t.Task.__module__.startswith('$tasks_module'), t.Task.__module__
"
    "$venv/bin/python" -m pytest -q "$@"
}

# Not the dashboard's browser tests: they exercise the browser and the dashboard, not Django's
# version, and would need Selenium here too (the main run has them).
django_tests=()
for file in tests/contrib/test_django_*.py; do
    [ "$file" = tests/contrib/test_django_browser.py ] || django_tests+=("$file")
done
run "${VENV_DJANGO6:-.venv-django6}" 'django>=6' django.tasks "${django_tests[@]}" "$@"
run "${VENV_DJANGO52:-.venv-django52}" 'django>=5.2,<6' django_tasks \
    tests/contrib/test_django_tasks.py tests/contrib/test_django_task_options.py \
    tests/contrib/test_django_example_project.py "$@"
