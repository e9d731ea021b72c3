"""The ``surfacelog`` command line: the top layer, above the actors.

``commands`` holds the typer app; the load run (``loadrun``), its live view (``live``),
its HTML report (``report_html``), ``inspect`` (``inspection``) and the terminal
renderings (``render``) sit beside it. Nothing below this package imports it.
"""

from surfacelog.cli.commands import app, main

__all__ = ["app", "main"]
