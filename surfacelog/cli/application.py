"""The ``surfacelog`` typer app and its console-script entry point (``main``).

Each command group adds its commands here, in the order ``--help`` lists them; ``main``
runs the app with the one-line Ctrl-C handling every command but ``run`` shares. A
command line naming a command builds the app with that command's group alone
(``GROUPS``), so that ``surfacelog fold`` does not import the modules of ``run`` or
``import``.

The console script (``surfacelog.cli.__main__.main``, which ends a Ctrl-C that lands
while this module loads with the same one line) imports this module, then runs ``main``.
So that a Ctrl-C is one line wherever it lands, the module body imports only what the
interpreter has loaded before any command line code runs (``importlib``, ``os``,
``sys``; ``typing`` only for the type checker), and ``main`` imports ``signal``, typer
and the commands where it handles a Ctrl-C.
"""

from __future__ import annotations

import _thread
import importlib
import os
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up
if TYPE_CHECKING:
    from typing import Any, Final

    import typer

GROUPS: Final = {
    "logs": ("fold", "repair"),
    "database": ("export", "import", "verify", "restore", "digest", "inspect", "fork"),
    "serve": ("serve",),
    "run": ("run",),
}
"""Each module of ``surfacelog.cli.commands`` and the commands it registers, in the
order ``--help`` lists them."""


def build_app(command: str | None = None) -> typer.Typer:
    """The app with every command group registered, or with only the group of
    ``command`` when it names one (a command line is parsed the same either way)."""
    import typer

    # Plain help and usage errors (click's), not typer's rich panels: rendering those
    # imports rich and costs ``surfacelog --help`` more than everything else it loads.
    built = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                        help="Event-sourced agent session logs with a replaceable surface.")
    # With one command registered typer would run it as the app itself; a callback
    # keeps the app a group whose commands are named on the command line.
    built.callback()(_no_options)
    wanted = [group for group, names in GROUPS.items() if command in names]
    for group in wanted or GROUPS:
        importlib.import_module(f"surfacelog.cli.commands.{group}").register(built)
    return built


def _no_options() -> None:
    """Event-sourced agent session logs with a replaceable surface."""


def __getattr__(name: str) -> Any:
    # ``app``, the whole command line (tests and ``python -m surfacelog.cli`` use it),
    # is built on first use: ``main`` builds only what its command line needs.
    if name == "app":
        built = globals()["app"] = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_interrupted = False
_loading = False
_INTERRUPTED: Final = "surfacelog: interrupted\n"
"""The one line a Ctrl-C ends a command with (exit status 130)."""


def _on_interrupt(signum: int, frame: object) -> None:
    """The first Ctrl-C interrupts the command; later ones are ignored while it cleans
    up (closing its store), so that it ends with one line, not a traceback. While the
    command line still loads, the Ctrl-C is only noted and ``main`` ends once the load
    is done: an exception raised in the middle of an import can land in the import
    machinery's own callbacks, which print it with a traceback."""
    import signal  # loaded by main already

    global _interrupted, _deferred_since
    if not _loading and _in_import_machinery(frame):
        # A command's own imports: raised here, in importlib's code (a module lock's
        # weakref callback, say), the exception is printed as "Exception ignored" with a
        # traceback, or leaves the import's locks half-updated. The same Ctrl-C is
        # delivered again a moment later, once out of it (for at most _DEFER_MAX_S: an
        # import that never ends must not keep a Ctrl-C from ending the command).
        now = time.monotonic()
        if _deferred_since is None:
            _deferred_since = now
        if now - _deferred_since < _DEFER_MAX_S:
            _redeliver(signum)
            return
    _deferred_since = None
    _interrupted = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _loading:
        raise KeyboardInterrupt


_IMPORT_MACHINERY: Final = "<frozen importlib."
"""How the import machinery's frames name their file (``<frozen importlib._bootstrap>``,
``<frozen importlib._bootstrap_external>``)."""

_REDELIVER_S: Final = 0.005
_DEFER_MAX_S: Final = 2.0
_deferred_since: float | None = None
"""When the Ctrl-C being delivered again was first put off (``time.monotonic``)."""


def _in_import_machinery(frame: object) -> bool:
    """Whether ``frame`` (a signal handler's: where the main thread was) or a frame
    that called it is the import machinery's own code: an exception raised there
    unwinds through importlib. (A clean-clone make test found the redelivered Ctrl-C
    landing in ``threading``, called by this very handler, called from importlib.)"""
    while frame is not None:
        code = getattr(frame, "f_code", None)
        if code is not None and str(code.co_filename).startswith(_IMPORT_MACHINERY):
            return True
        frame = getattr(frame, "f_back", None)
    return False


def _redeliver(signum: int) -> None:
    """Send this process ``signum`` again in ``_REDELIVER_S``, from a thread of its own
    (the handler must return first). ``_thread``, not ``threading``: starting a
    ``threading.Timer`` waits for the thread to run, and on a loaded machine the
    signal came back during that wait, inside this handler."""
    _thread.start_new_thread(_send_later, (signum,))


def _send_later(signum: int) -> None:
    time.sleep(_REDELIVER_S)
    os.kill(os.getpid(), signum)


def main() -> None:
    """Console-script entry point. Ctrl-C (once or repeatedly) ends every command but
    ``run`` (which reports what it did first) with ``surfacelog: interrupted`` on
    stderr and exit status 130, never a traceback."""
    global _loading
    handled = sys.argv[1:2] != ["run"]
    try:
        import signal

        if handled:
            _loading = True
            signal.signal(signal.SIGINT, _on_interrupt)
    except KeyboardInterrupt:  # before the handler: the same one line
        sys.stderr.write(_INTERRUPTED)
        raise SystemExit(130) from None
    watched = _WatchedOutput(sys.stdout)
    sys.stdout = watched
    try:
        app = build_app(sys.argv[1] if len(sys.argv) > 1 else None)
        _loading = False
        if _interrupted:
            raise KeyboardInterrupt
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
    finally:
        if handled and not _interrupted:
            signal.signal(signal.SIGINT, _on_late_interrupt)


def _on_late_interrupt(signum: int, frame: object) -> None:
    """A Ctrl-C after the command ended, while the interpreter shuts down: a
    ``KeyboardInterrupt`` raised there is printed as "Exception ignored" with a
    traceback. The command's output is flushed, then the process ends at once with
    ``surfacelog: interrupted`` and status 130 (an exception of that flush is moot: the
    process is ending on the user's request, and ``os._exit`` never hangs)."""
    import signal  # loaded by main already

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.stdout.flush()
    finally:
        os.write(2, _INTERRUPTED.encode())
        os._exit(130)


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
    import signal  # loaded by main already

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.stderr.write(_INTERRUPTED)
        sys.stderr.flush()
    finally:
        raise SystemExit(130)
