"""The ``surfacelog`` command line: the top layer, above the actors.

``commands`` holds the typer app. Beside it: the load run's configuration and result
(``runmodel``), its workload (``loadrun``), its live view (``live``) and its HTML report
(``report_html``); ``inspect`` (``inspection``) and the terminal renderings (``render``).
Nothing below this package imports it.
"""

from surfacelog.cli import forking  # noqa: F401  (registers ``fork`` on the app)
from surfacelog.cli.commands import app, main

__all__ = ["app", "main"]
