"""The ``surfacelog`` command line: the top layer, above the actors.

``application`` holds the typer app and ``main``; each module of ``commands`` registers
one group of commands on it, sharing ``common``'s options and exits. Beside them: the
load run's configuration and result (``runmodel``), its workload (``loadrun``), its
live view (``run_display``) and its HTML report (``report_html``); ``inspect``
(``inspection``), ``fork`` (``forking``), ``serve`` (``serving``) and the terminal
renderings (``render``). Nothing below this package imports it.

This package loads nothing until it is used: the console script is ``__main__.main``,
which is running (and handles Ctrl-C) before the command line's modules load.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING: start-up imports no more than it must
if TYPE_CHECKING:
    from typing import Any


def __getattr__(name: str) -> Any:
    # ``main`` (the console script's) and ``app`` (the whole command line), from
    # ``application`` on first use.
    if name in ("app", "main"):
        from surfacelog.cli import application

        return getattr(application, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
