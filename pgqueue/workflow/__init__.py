"""Workflows: jobs that wait for other jobs (``depends_on``), and chains, groups and chords
built on them (see docs/workflows.md)."""
