"""The ``surfacelog`` typer app and its console-script entry point.

Each command group adds its commands here, in the order ``--help`` lists them; ``main``
runs the app with the one-line Ctrl-C handling every command but ``run`` shares.
"""

from __future__ import annotations

import signal
import sys

import typer

from surfacelog.cli.commands import database, logs, run, serve

# Plain help and usage errors (click's), not typer's rich panels: rendering those
# imports rich and costs ``surfacelog --help`` more than everything else it loads.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Event-sourced agent session logs with a replaceable surface.")
logs.register(app)
database.register(app)
serve.register(app)
run.register(app)

_interrupted = False


def _on_interrupt(signum: int, frame: object) -> None:
    """The first Ctrl-C interrupts the command; later ones are ignored while it cleans
    up (closing its store), so that it ends with one line, not a traceback."""
    global _interrupted
    _interrupted = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry point. Ctrl-C (once or repeatedly) ends every command but
    ``run`` (which reports what it did first) with ``surfacelog: interrupted`` on
    stderr and exit status 130, never a traceback."""
    if sys.argv[1:2] != ["run"]:
        signal.signal(signal.SIGINT, _on_interrupt)
    try:
        app()
    except KeyboardInterrupt:
        _interrupted_exit()
    except SystemExit as exc:
        if _interrupted and exc.code in (130, 1):
            _interrupted_exit()
        raise


def _interrupted_exit() -> None:
    """End with ``surfacelog: interrupted`` on stderr and exit status 130, Ctrl-C
    ignored meanwhile."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.stderr.write("surfacelog: interrupted\n")
        sys.stderr.flush()
    finally:
        raise SystemExit(130)
