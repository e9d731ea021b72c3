"""``python -m surfacelog.cli``: the same command line as the ``surfacelog`` script."""

from surfacelog.cli.application import main

if __name__ == "__main__":
    main()
