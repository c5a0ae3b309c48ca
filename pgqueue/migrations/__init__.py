"""pgqueue's Alembic migrations (script_location of ``alembic.ini`` and of ``pgqueue migrate``)."""
