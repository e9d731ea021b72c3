"""``make test-sdk``: the agent SDKs' own session tests, run unchanged against our adapters.

Fetches each SDK's source distribution at the pinned version from PyPI (``pip download
--no-binary :all:``) once into the cache folder (``.sdk-tests/``, kept out of git), and
keeps its ``tests/``, its ``LICENSE`` and its ``pyproject.toml`` (pytest's settings for
those tests) in ``.sdk-tests/<name>-<version>/``; a cache that holds the pinned version
is used as it is (no network). Then runs the suite's session tests once per backend,
``SURFACELOG_SDK_BACKEND`` telling the plugin (``sdk_<suite>.py`` beside this file)
which class the tests get: ``sdk`` (the SDK's own, the control), ``embedded`` and
``ray`` (on a local Ray of its own, or on the running one ``--ray-address`` names:
``sdk_ray.py``). Exits non-zero when any run fails.

Google ADK's sdist ships no tests (its ``tests/unittests/sessions/`` is not on PyPI; they
import ``DatabaseSessionService``, which needs ``sqlalchemy``, ``google-adk[db]``):
that suite runs only when its files were put in the cache by hand
(``.sdk-tests/google-adk-<version>/tests/unittests/sessions/`` with its ``LICENSE``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sdk_ray import ADDRESS_ENV

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Suite:
    name: str  # the distribution on PyPI
    version: str
    plugin: str  # module beside this file
    files: tuple[str, ...]  # test files, relative to the sdist's root
    keep: tuple[str, ...] = ("tests/", "LICENSE", "pyproject.toml")
    fetchable: bool = True  # the sdist ships the tests


SUITES = (
    Suite("openai-agents", "0.24.0", "sdk_openai_agents",
          ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")),
    Suite("google-adk", "2.13.0", "sdk_adk", ("tests/unittests/sessions",),
          fetchable=False),
)
BACKENDS = ("sdk", "embedded", "ray")


def cached(cache: Path, suite: Suite) -> Path:
    return cache / f"{suite.name}-{suite.version}"


def fetch(cache: Path, suite: Suite) -> Path | None:
    """The suite's folder in the cache, downloaded first when missing; ``None`` when
    the suite cannot be had from PyPI and is not in the cache."""
    folder = cached(cache, suite)
    if (folder / ".complete").exists() or (not suite.fetchable and folder.exists()):
        return folder
    if not suite.fetchable:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", "-d", tmp,
                        f"{suite.name}=={suite.version}"], check=True)
        (sdist,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(sdist) as tar:
            members = []
            for member in tar.getmembers():
                _, _, inner = member.name.partition("/")
                if inner and any(inner == k or inner.startswith(k) for k in suite.keep):
                    member.name = inner
                    members.append(member)
            folder.mkdir(parents=True, exist_ok=True)
            tar.extractall(folder, members=members, filter="data")
    (folder / ".complete").write_text(f"{suite.name}=={suite.version}\n")
    return folder


def run(folder: Path, suite: Suite, backend: str, extra: list[str],
        ray_address: str | None = None) -> tuple[int, str]:
    # Only the plugins the SDK's tests use: each of the three runs would otherwise load
    # every pytest plugin of this venv first (schemathesis, hypothesis, xdist, ...),
    # about 2 s of start-up each. A plugin they need and lack fails them loudly.
    env = dict(os.environ, SURFACELOG_SDK_BACKEND=backend, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE),
                                                        os.environ.get("PYTHONPATH")])))
    if ray_address and backend == "ray":
        env[ADDRESS_ENV] = ray_address
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_asyncio.plugin", "-p",
           "no:cacheprovider", "-p", suite.plugin, "-rfs", "--rootdir", str(folder),
           "-c", str(folder / "pyproject.toml"), *suite.files, *extra]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    if proc.returncode != 0:
        sys.stdout.write(out)
    return proc.returncode, summary[-1].strip("= ") if summary else "(no summary)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=HERE.parent.parent / ".sdk-tests")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--ray-address", help="the ray backend joins this running Ray "
                        "(its GCS address) instead of starting one")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    args.cache = args.cache.resolve()
    failed = False
    for suite in SUITES:
        folder = fetch(args.cache, suite)
        if folder is None:
            print(f"{suite.name} {suite.version}: its sdist ships no tests; not run "
                  f"(put them in {cached(args.cache, suite)} to run them)")
            continue
        for backend in args.backend or BACKENDS:
            started = time.monotonic()
            code, summary = run(folder, suite, backend, args.pytest_args, args.ray_address)
            failed = failed or code != 0
            print(f"{suite.name} {suite.version} [{backend}]: {summary} "
                  f"({time.monotonic() - started:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
