"""The CLI's own error types (each command turns a typed error into one line and an exit status)."""

from __future__ import annotations

from surfacelog.schema.errors import SurfacelogError


class RayUnreachable(ConnectionError, SurfacelogError):
    """``--address`` does not accept a connection within ``CONNECT_TIMEOUT_S``."""


class DatabaseInUse(SurfacelogError):
    """Another ``surfacelog run`` holds the database (or shard map) file."""


class OutputError(SurfacelogError):
    """An output file is refused (it would destroy data), or could not be written.
    ``refused`` tells which: refused means nothing was touched."""

    def __init__(self, message: str, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.refused))
