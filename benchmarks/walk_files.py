"""Which of the package's files one durable append, or one ``surfacelog import``, runs code
in: the "walk" of issue 24 (how many files a reader follows to understand the path).

A file counts when a function defined in it is called (or a coroutine of it resumed)
while the walk is on, in any thread, and in every process of the path: the tool sets a
profile hook (``sys.setprofile``, ``threading.setprofile``) here and, over Ray, in each
worker through ``runtime_env``'s ``worker_process_setup_hook``. Code that runs because a
module is being imported (its body, the decorators and class statements it runs) does not
count: an import is paid once per process, not per append.

Walks (``--walk``):

- ``append-in-process``: one durable append through ``LiveSession`` on a SQLite store
  (the session already loaded and taken, as every append after the first);
- ``append-owner``: one durable append through ``Client``/``SessionHandle`` to the owner
  actor (``writer="owner"``, packed), the default of ``surfacelog run``;
- ``append-journal``: the same with a journal actor as the shard's writer
  (``writer="journal"``), ``connect``'s default;
- ``import``: ``surfacelog import DB FILE`` of one small session file, in this process.

Prints each file (relative to the package) with the functions that ran in it, then the
count. Run it at two commits to compare (``PYTHONPATH`` naming the other checkout's root
makes its ``surfacelog`` the one imported)."""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
PHASE_FILE = os.environ.get("WALK_PHASE_FILE", "")
"""The file whose content (``on``, ``dump``) switches the walk in every process."""

_seen: set[tuple[str, str]] = set()
_on = False


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if not _on or event != "call":
        return
    code = frame.f_code
    key = (code.co_filename, code.co_name)
    if f"{os.sep}surfacelog{os.sep}" in key[0] and key not in _seen and \
            not _importing(frame):
        _seen.add(key)


def _follow_phase() -> None:
    global _on
    last = ""
    while True:
        try:
            phase = Path(PHASE_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            phase = ""
        if phase != last:
            last = phase
            if phase == "on":
                _seen.clear()
                _on = True
            elif phase == "dump":
                _on = False
                out = Path(PHASE_FILE).with_name(f"walk-{os.getpid()}.txt")
                out.write_text("\n".join(f"{f}::{n}" for f, n in sorted(_seen)),
                               encoding="utf-8")
        time.sleep(0.005)


def install() -> None:
    """The profile hook of this process (each Ray worker runs this first)."""
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    threading.Thread(target=_follow_phase, daemon=True).start()


def _phase(value: str) -> None:
    Path(PHASE_FILE).write_text(value, encoding="utf-8")


def _collect() -> dict[str, set[str]]:
    time.sleep(0.05)
    _phase("dump")
    time.sleep(0.5)
    files: dict[str, set[str]] = {}
    for dump in glob.glob(str(Path(PHASE_FILE).with_name("walk-*.txt"))):
        for line in Path(dump).read_text(encoding="utf-8").splitlines():
            path, _, name = line.partition("::")
            rel = path.split(f"{os.sep}surfacelog{os.sep}", 1)[1]
            files.setdefault(rel, set()).add(name)
    return files


def _spec() -> Any:
    from surfacelog.session import AppendSpec

    return AppendSpec("user/message", {"id": "u-1", "role": "user",
                                       "source": {"kind": "user"},
                                       "content": [{"type": "text", "text": "hi"}]},
                      surface_op="append")


async def _append_in_process(folder: str) -> dict[str, set[str]]:
    from surfacelog.store.sqlite import SqliteEventStore
    try:
        from surfacelog.runtime.live import LiveSession
    except ImportError:  # before the runtime layer (issue 24)
        from surfacelog.actors.live import LiveSession  # type: ignore[no-redef]

    store = await SqliteEventStore.open(os.path.join(folder, "walk.db"))
    live = await LiveSession.activate("s1", store, durability="durable")
    await live.append_batch([_spec()])
    await live.append_batch([_spec()])
    _phase("on")
    time.sleep(0.05)
    await live.append_batch([_spec()])
    files = _collect()
    await store.close()
    return files


def _append_over_ray(folder: str, writer: str) -> dict[str, set[str]]:
    import ray

    import surfacelog

    client = surfacelog.connect(
        db=os.path.join(folder, "walk.db"), writer=writer, placement="packed",
        num_cpus=2, include_dashboard=False, log_to_driver=False,
        runtime_env={"worker_process_setup_hook": "walk_files.install"})
    session = client.session("s1")

    async def appends() -> None:
        await session.append_batch([_spec()])
        await session.append_batch([_spec()])
        _phase("on")
        await asyncio.sleep(0.1)
        await session.append_batch([_spec()])

    asyncio.run(appends())
    files = _collect()
    client.shutdown()
    ray.shutdown()
    return files


def _import(folder: str) -> dict[str, set[str]]:
    from surfacelog.cli.application import main

    log = Path(folder) / "one.jsonl"
    log.write_text(
        '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}\n'
        '{"type":"user/message","seq":1,"time":1,"data":{"id":"u-1","role":"user",'
        '"source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]},'
        '"surfaceOp":"append"}\n', encoding="utf-8")
    _phase("on")
    time.sleep(0.05)
    sys.argv = ["surfacelog", "import", os.path.join(folder, "walk.db"), str(log)]
    try:
        main()
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    return _collect()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", required=True, choices=(
        "append-in-process", "append-owner", "append-journal", "import"))
    args = parser.parse_args(argv)
    if not PHASE_FILE:
        # Again in a child whose environment names the phase file and puts this folder
        # on the path of every process (Ray's workers import this module by name).
        with tempfile.TemporaryDirectory(prefix="walk-") as folder:
            env = {**os.environ, "WALK_PHASE_FILE": os.path.join(folder, "phase"),
                   "PYTHONPATH": os.pathsep.join(filter(None, [
                       os.environ.get("PYTHONPATH"), str(HERE)]))}
            return subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env,
                                  check=False).returncode
    _phase("off")
    install()
    with tempfile.TemporaryDirectory(prefix="walk-data-") as folder:
        if args.walk == "append-in-process":
            files = asyncio.run(_append_in_process(folder))
        elif args.walk == "import":
            files = _import(folder)
        else:
            files = _append_over_ray(folder, args.walk.removeprefix("append-"))
    for rel in sorted(files):
        print(f"{rel}: {', '.join(sorted(files[rel]))}")
    print(f"{args.walk}: {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
