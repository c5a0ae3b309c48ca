"""Unit tests: a package, so that its conftest does not take the place of tests/conftest.py
as the module ``conftest`` other tests import helpers from.
"""
