#!/usr/bin/env python
"""Django's command-line utility for administrative tasks.

Without DJANGO_SETTINGS_MODULE the production settings (`portal.settings.base`) are used, and they need
DJANGO_SECRET_KEY and DATABASE_URL. When those are missing:
- the tools meant for tenants' CI pipelines (OFFLINE_COMMANDS) run with `portal.settings.offline`: no database,
  no secret; they validate and explain against files given on the command line;
- every other command stops with one line naming what to set, instead of a traceback.
"""

import os
import sys

# Commands that work without the inventory database when given their input as files.
OFFLINE_COMMANDS = frozenset({"cel_eval", "explain_pod", "validate_manifest", "kubesim"})
PRODUCTION_SETTINGS = "portal.settings.base"
REQUIRED = ("DJANGO_SECRET_KEY", "DATABASE_URL")


def _missing_settings(module: str) -> str | None:
    """Import the settings module; the error message when it cannot load for want of configuration."""
    import importlib

    from django.core.exceptions import ImproperlyConfigured

    try:
        importlib.import_module(module)
    except ImproperlyConfigured as exc:
        return str(exc)
    return None


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if "DJANGO_SETTINGS_MODULE" not in os.environ:
        os.environ["DJANGO_SETTINGS_MODULE"] = PRODUCTION_SETTINGS
        problem = _missing_settings(PRODUCTION_SETTINGS)
        if problem is not None:
            if command in OFFLINE_COMMANDS:
                os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.offline"
            elif command not in ("", "help", "--help", "-h", "version", "--version"):
                missing = [name for name in REQUIRED if not os.environ.get(name)]
                sys.stderr.write(
                    f"manage.py {command}: {problem} (missing: {', '.join(missing) or 'see above'}). "
                    "Set the variables listed in .env.example (or copy it to .env), or run with "
                    "DJANGO_SETTINGS_MODULE=portal.settings.demo for the embedded defaults.\n"
                )
                sys.exit(2)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
