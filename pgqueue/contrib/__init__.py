"""Integrations with web frameworks: ``pgqueue.contrib.django`` and ``pgqueue.contrib.flask``.

They use only pgqueue's public API; nothing in the core imports them.
"""
