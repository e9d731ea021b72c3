"""The ``surfacelog`` command line: the top layer, above the actors.

``application`` holds the typer app and ``main``; each module of ``commands`` registers
one group of commands on it, sharing ``common``'s options and exits. Beside them: the
load run's configuration and result (``runmodel``), its workload (``loadrun``), its
live view (``run_display``) and its HTML report (``report_html``); ``inspect``
(``inspection``), ``fork`` (``forking``), ``serve`` (``serving``) and the terminal
renderings (``render``). Nothing below this package imports it.
"""

from surfacelog.cli.application import app, main

__all__ = ["app", "main"]
