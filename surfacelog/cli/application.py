"""The ``surfacelog`` typer app and its console-script entry point.

Each command group adds its commands here, in the order ``--help`` lists them; ``main``
runs the app with the one-line Ctrl-C handling every command but ``run`` shares.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

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
    watched = _WatchedOutput(sys.stdout)
    sys.stdout = watched
    try:
        app()
    except KeyboardInterrupt:
        _interrupted_exit()
    except SystemExit as exc:
        if _interrupted and exc.code in (130, 1):
            _interrupted_exit()
        raise
    except OSError:
        if watched.failed is None:
            raise
        _output_failed_exit(watched.failed)


class _WatchedOutput:
    """Standard output (text, and its ``buffer`` for bytes), remembering the first
    write or flush that failed: a full device, a closed pipe. The failure still
    raises where it happened; ``main`` then knows it was the output's."""

    def __init__(self, stream: Any, owner: _WatchedOutput | None = None) -> None:
        self._stream = stream
        self._owner = owner or self
        self.failed: OSError | None = None

    def _note(self, exc: OSError) -> None:
        if self._owner.failed is None:
            self._owner.failed = exc

    def write(self, data: Any) -> Any:
        try:
            return self._stream.write(data)
        except OSError as exc:
            self._note(exc)
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._note(exc)
            raise

    @property
    def buffer(self) -> _WatchedOutput:
        return _WatchedOutput(self._stream.buffer, self._owner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _output_failed_exit(exc: OSError) -> None:
    """End with one line on stderr and exit status 1 when standard output failed (a
    reader that closed the pipe, e.g. ``| head``, is told nothing: it asked for no
    more). Standard output is pointed at /dev/null first, so that the interpreter's
    own flush at exit does not fail again."""
    import errno
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    if exc.errno != errno.EPIPE:
        sys.stderr.write(f"surfacelog: cannot write the output: "
                         f"{exc.strerror or exc} (errno {exc.errno})\n")
        sys.stderr.flush()
    raise SystemExit(1)


def _interrupted_exit() -> None:
    """End with ``surfacelog: interrupted`` on stderr and exit status 130, Ctrl-C
    ignored meanwhile."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.stderr.write("surfacelog: interrupted\n")
        sys.stderr.flush()
    finally:
        raise SystemExit(130)
