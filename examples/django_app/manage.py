#!/usr/bin/env python
"""The example shop's manage.py: `python manage.py migrate`, `python manage.py runserver`,
`python manage.py pgqueue worker`."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
