"""The ``surfacelog`` command line: the top layer, above the actors.

``application`` holds the typer app and ``main``; each module of ``commands`` registers
one group of commands on it, sharing ``common``'s options and exits. Beside them: the
load run's configuration and result (``runmodel``), its workload (``loadrun``), its
live view (``run_display``) and its HTML report (``report_html``); ``inspect``
(``inspection``), ``fork`` (``forking``), ``serve`` (``serving``) and the terminal
renderings (``render``). Nothing below this package imports it.

This package loads nothing until it is used, so that the console script's ``main``
is running (and handles Ctrl-C) before the command line's modules load.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Console-script entry point: ``application.main``. A Ctrl-C while the command
    line is still loading ends as one during a command does: ``surfacelog:
    interrupted`` on stderr, exit status 130."""
    try:
        from surfacelog.cli.application import main as run
    except KeyboardInterrupt:
        sys.stderr.write("surfacelog: interrupted\n")
        raise SystemExit(130) from None
    run()


def __getattr__(name: str) -> object:
    if name == "app":
        from surfacelog.cli.application import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
