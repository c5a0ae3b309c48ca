"""Unit tests. A package, so that its conftest does not take the place of tests/conftest.py as
the module ``conftest`` that other tests import helpers from."""
