"""``python -m surfacelog.cli`` and the ``surfacelog`` console script: ``main`` loads the
command line (``application``) and runs it.

The load takes 0.1-0.3 s, longer on a first run that compiles the modules; a Ctrl-C that
lands in it ends the process with the same one line as one that lands in a command.
"""

import sys


def main() -> None:
    """Load ``surfacelog.cli.application`` and run its ``main``. A Ctrl-C while it loads
    (or one that its ``main`` lets through) ends with ``surfacelog: interrupted`` on
    stderr and exit status 130, never a traceback."""
    try:
        from surfacelog.cli.application import main as run

        run()
    except KeyboardInterrupt:
        # application's INTERRUPTED, spelled here: its load may be what was interrupted.
        sys.stderr.write("surfacelog: interrupted\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
