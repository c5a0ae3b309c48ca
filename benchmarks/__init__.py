"""pgqueue's benchmarks: ``python -m benchmarks`` (``--help`` for the options).

Every benchmark runs on a throwaway PostgreSQL server with default durability settings and on a
SQLite file, prints a table and writes JSON. The figures and the machine they came from are in
``docs/benchmarks.md``. Benchmarks are never timed unit tests: the test suite only checks that
``python -m benchmarks --quick`` runs.
"""
