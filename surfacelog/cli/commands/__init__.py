"""The commands of ``surfacelog``, one module per group, each adding its commands to
the app with ``register(app)`` (``cli.application`` calls them): ``logs`` (fold,
repair: log files, offline), ``database`` (export, import, verify, restore, digest,
inspect, fork), ``serve`` (the HTTP gateway) and ``run`` (the load run)."""
