"""Every use of Ray's private API (``ray._private``, ``ray._raylet``), in one place.

Checked against Ray 2.60.0 (``CHECKED_WITH``). Ray gives no public call for what these
do, and does not keep its private names from one release to the next, so the rest of
the package (and its tests and benchmarks) reaches them only through the functions
below:

- ``set_cluster_switch``: the constant ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` sets when
  Ray is imported, for a local Ray on loopback (``client.local_ray_on_loopback``);
- ``gcs_server_pid`` and ``kill_local_ray_processes``: the GCS of the Ray this process
  started, and stopping that Ray's processes when it died (``cli/run_display.py``);
- ``require_token_auth``, ``ensure_auth_token``, ``reload_ray_config`` and
  ``auth_mode``: Ray's token
  authentication for a ``ray.cluster_utils.Cluster`` started by hand
  (``cli/localcluster.py``, the cluster tests and benchmarks);
- ``traced_like_an_actor``: an actor class's methods wrapped as Ray wraps them in its
  worker, for a benchmark that measures the class in one process
  (``benchmarks/bench_hosting.py``).

Each private name is a ``PrivateName`` of ``USED``, with the call the code makes.
``tests/actors/test_raycompat.py`` checks every one against the installed Ray (it
exists; a callable accepts that call) and fails naming the missing or changed one, so a
Ray upgrade that breaks one fails there, not in a cluster run. At run time a missing
name raises ``RayCompatError`` naming it. Nothing here imports Ray until called: the
offline CLI commands import this module's importers without loading Ray.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Final, NamedTuple, TypeVar

from surfacelog.actors.errors import RayCompatError

T = TypeVar("T")

CHECKED_WITH: Final = "2.60.0"
"""The Ray release every name of ``USED`` was checked against."""


class PrivateName(NamedTuple):
    """One private name of Ray that the package uses.

    ``module`` is imported and ``attribute`` (dotted: ``Node.kill_all_processes``)
    looked up in it. ``call``: the positional and keyword arguments the code passes
    when it calls it (``None``: not called, read or set). ``method``: called on an
    instance (its ``self`` is not in ``call``). ``kind``: the type a value must have
    (``None``: any)."""

    module: str
    attribute: str
    call: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    method: bool = False
    kind: type | None = None

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.attribute}"


ENABLE_RAY_CLUSTER: Final = PrivateName("ray._private.ray_constants", "ENABLE_RAY_CLUSTER",
                                        kind=bool)
PROCESS_TYPE_GCS_SERVER: Final = PrivateName("ray._private.ray_constants",
                                             "PROCESS_TYPE_GCS_SERVER", kind=str)
GLOBAL_NODE: Final = PrivateName("ray._private.worker", "_global_node")
"""The ``ray._private.node.Node`` this process started (``None`` when it joined a Ray
started elsewhere, or none is running). Its ``all_processes`` (process type -> list of
``ProcessInfo``, each with ``.process``, a ``Popen``) is an instance attribute, checked
on a live node by the test."""
KILL_ALL_PROCESSES: Final = PrivateName(
    "ray._private.node", "Node.kill_all_processes",
    call=((), {"check_alive": False, "allow_graceful": False}), method=True)
ENSURE_TOKEN: Final = PrivateName(
    "ray._private.authentication.authentication_token_setup",
    "ensure_token_if_auth_enabled", call=((None,), {"create_token_if_missing": True}))
GET_AUTHENTICATION_MODE: Final = PrivateName("ray._raylet", "get_authentication_mode",
                                             call=((), {}))
TOKEN_MODE: Final = PrivateName("ray._raylet", "AuthenticationMode.TOKEN")
CONFIG_INITIALIZE: Final = PrivateName("ray._raylet", "Config.initialize",
                                       call=(("",), {}))
INJECT_TRACING: Final = PrivateName("ray.util.tracing.tracing_helper",
                                    "_inject_tracing_into_class", call=((object,), {}))

USED: Final = (ENABLE_RAY_CLUSTER, PROCESS_TYPE_GCS_SERVER, GLOBAL_NODE, KILL_ALL_PROCESSES,
               ENSURE_TOKEN, GET_AUTHENTICATION_MODE, TOKEN_MODE, CONFIG_INITIALIZE,
               INJECT_TRACING)
"""Every private name of Ray the package uses."""


def ray_version() -> str:
    """The installed Ray's release (imports Ray)."""
    import ray

    return str(ray.__version__)


def _missing(name: PrivateName, why: str) -> RayCompatError:
    return RayCompatError(f"Ray {ray_version()}: {name.qualified} {why} (surfacelog's "
                          f"private Ray names were checked against Ray {CHECKED_WITH}: "
                          f"see surfacelog/actors/raycompat.py)")


def resolve(name: PrivateName) -> Any:
    """The object ``name`` names in the installed Ray. Raises ``RayCompatError`` naming
    it when its module cannot be imported, it is missing, or it is not of its ``kind``."""
    try:
        found: Any = importlib.import_module(name.module)
    except ImportError as exc:
        raise _missing(name, f"cannot be imported ({exc})") from None
    for part in name.attribute.split("."):
        if not hasattr(found, part):
            raise _missing(name, f"is missing (no attribute {part!r})")
        found = getattr(found, part)
    if name.kind is not None and not isinstance(found, name.kind):
        raise _missing(name, f"is a {type(found).__name__}, not a {name.kind.__name__}")
    return found


def check(name: PrivateName) -> None:
    """Raise ``RayCompatError`` naming ``name`` when it is missing from the installed
    Ray (see ``resolve``) or, when the code calls it, is not callable or does not accept
    the arguments of ``name.call`` (checked against its signature, when Ray gives one:
    compiled functions may not)."""
    found = resolve(name)
    if name.call is None:
        return
    if not callable(found):
        raise _missing(name, "is not callable")
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):  # no signature to check: callable is all we know
        return
    args, kwargs = name.call
    try:
        signature.bind(*((None,) if name.method else ()), *args, **kwargs)
    except TypeError as exc:
        raise _missing(name, f"no longer accepts the call {_call_text(name)}: {exc} "
                             f"(its signature is now {signature})") from None


def _call_text(name: PrivateName) -> str:
    assert name.call is not None
    args, kwargs = name.call
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name.attribute.rsplit('.', 1)[-1]}({', '.join(shown)})"


def _call(name: PrivateName, target: Any = None) -> Any:
    """Call ``name`` as the code does (on ``target`` when it is a method)."""
    assert name.call is not None
    args, kwargs = name.call
    if name.method:
        return getattr(target, name.attribute.rsplit(".", 1)[-1])(*args, **kwargs)
    return resolve(name)(*args, **kwargs)


# -- a local Ray on loopback ------------------------------------------------------------


def set_cluster_switch(enabled: bool) -> None:
    """Set the already imported constant that ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``
    sets when Ray is imported (whether the node binds to its outward IP to form a
    cluster). Raises ``RayCompatError`` when this Ray has no such constant."""
    module = importlib.import_module(ENABLE_RAY_CLUSTER.module)
    resolve(ENABLE_RAY_CLUSTER)
    setattr(module, ENABLE_RAY_CLUSTER.attribute, enabled)


# -- the Ray this process started --------------------------------------------------------


def gcs_server_pid() -> int | None:
    """The pid of the GCS server of the Ray node this process started, ``None`` when it
    started none (it joined a Ray started elsewhere, or Ray is not running). Raises
    ``RayCompatError`` when this Ray lacks a name it is found through."""
    node = resolve(GLOBAL_NODE)
    gcs = resolve(PROCESS_TYPE_GCS_SERVER)
    procs = getattr(node, "all_processes", {}).get(gcs) if node is not None else None
    if not procs:
        return None
    return int(procs[0].process.pid)


def kill_local_ray_processes() -> None:
    """Kill every process of the Ray node this process started, at once (no graceful
    stop, no check that they were alive); nothing when it started none. Raises
    ``RayCompatError`` when this Ray lacks a name it needs, and what Ray raises."""
    node = resolve(GLOBAL_NODE)
    check(KILL_ALL_PROCESSES)
    if node is not None:
        _call(KILL_ALL_PROCESSES, node)


# -- token authentication -------------------------------------------------------------


def require_token_auth() -> None:
    """Return when this Ray has every name the calls below use; raise
    ``RayCompatError`` naming the first missing one otherwise (a Ray older than token
    authentication, or one that moved it). Changes nothing."""
    for name in (ENSURE_TOKEN, GET_AUTHENTICATION_MODE, TOKEN_MODE, CONFIG_INITIALIZE):
        check(name)


def ensure_auth_token() -> None:
    """Create Ray's authentication token when token authentication is on and there is
    none yet (what ``ray.init`` does, for a ``Cluster`` started by hand). Raises
    ``RayCompatError`` when this Ray has no token authentication."""
    _call(ENSURE_TOKEN)


def reload_ray_config() -> None:
    """Make this already running process read Ray's configuration from the environment
    again (``RAY_AUTH_MODE``, say, which Ray reads when imported). Raises
    ``RayCompatError`` when this Ray lacks the call."""
    _call(CONFIG_INITIALIZE)


def auth_mode() -> str:
    """``"token"`` when Ray's token authentication is in force in this process, else
    Ray's name of the mode in force. Raises ``RayCompatError`` when this Ray has no
    token authentication."""
    mode = _call(GET_AUTHENTICATION_MODE)
    return "token" if mode == resolve(TOKEN_MODE) else str(mode)


# -- an actor class as Ray's worker runs it ---------------------------------------------


def traced_like_an_actor(cls: type[T]) -> type[T]:
    """A subclass of ``cls`` whose methods are wrapped as a Ray worker wraps those of
    the actor class it hosts (a tracing coroutine around each, a no-op without a trace
    context): to measure in one process what the class costs in an actor. As in a
    worker, Ray also gives each of ``cls``'s own functions a ``__signature__`` naming
    the trace context (``_ray_trace_ctx``). Raises ``RayCompatError`` when this Ray
    lacks the call."""
    check(INJECT_TRACING)
    traced = type(cls.__name__, (cls,), {"__module__": cls.__module__})
    resolve(INJECT_TRACING)(traced)
    return traced


__all__ = ["CHECKED_WITH", "USED", "PrivateName", "RayCompatError", "auth_mode", "check",
           "ensure_auth_token", "gcs_server_pid", "kill_local_ray_processes",
           "ray_version", "reload_ray_config", "require_token_auth", "resolve",
           "set_cluster_switch", "traced_like_an_actor"]
