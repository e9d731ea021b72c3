"""The HTML report of ``surfacelog run --report`` in a real headless browser (Debian's
``chromium`` and ``chromium-driver``, installed here when missing): it loads with no
console error, fetches nothing, and each chart has drawn, with its title, axis titles
and legend; its tables read as text, not Python.

The report is rendered from a ``RunResult`` built of the real result types with figures
shaped as a run's (chaos kills and a node kill included); ``test_load_run.py`` checks the
report of a real run."""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surfacelog.actors.compactor import CompactorStats
from surfacelog.actors.driver import DriverProgress, SurfacePoint
from surfacelog.cli.report_html import render_report, write_html
from surfacelog.cli.runmodel import NodeKill, RunConfig, RunResult, Sample
from surfacelog.session.digest import digest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _install_chromium() -> str | None:
    """Install chromium and its driver when missing; why not, when they cannot be."""
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        return None
    if shutil.which("apt-get") is None:
        return "chromium is missing and there is no apt-get to install it"
    done = subprocess.run(["apt-get", "install", "-y", "chromium", "chromium-driver"],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"apt-get install chromium chromium-driver failed: {done.stderr[-300:]}"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = _install_chromium()
    if why is not None:
        pytest.skip(f"no headless browser: {why}")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def a_result(tmp_path: Path) -> RunResult:
    rng = random.Random(7)
    progress = DriverProgress(sessions=3, turns_done=30, events=4000, appends=900)
    for k in range(900):
        progress.append_times_ms.append(k * 11.0)
        progress.latencies_ms.append(2.0 + rng.random() * (40.0 if k % 50 == 0 else 5.0))
    for k in range(30):
        progress.surface_points.append(SurfacePoint(k * 330.0, f"run-{k % 3:04d}",
                                                    10 + k % 7, k // 7))
    progress.shard("default").events = 4000
    progress.shard("default").latencies_ms.extend(progress.latencies_ms)
    samples = [Sample(t=0.25 * k, turns=k, events=100 * k, errors=k // 20,
                      conflicts=k // 8, compactions=k // 10, prunes=k // 12,
                      p50_ms=3.0) for k in range(1, 41)]
    config = RunConfig(sessions=3, turns=10, db=tmp_path / "r.db", kill_every_s=0.7)
    live = {f"run-{k:04d}": digest(10, [0, 1], 0, []) for k in range(3)}
    return RunResult(config, 10.0, progress, CompactorStats(committed=4),
                     CompactorStats(prunes=3), 123_456, live, True, [], samples,
                     actor_kills=2, shard_nodes={"default": None},
                     node_kills=[NodeKill(node=0, shards=["default"], graceful=False,
                                          lost_at=1003.0, added_at=1005.0)],
                     actor_kill_times=[2.5, 6.0], started_at=1000.0)


def test_the_browser_keeps_its_temp_files_in_the_tests_temp_dir(
        tmp_path_factory: pytest.TempPathFactory, browser: Any) -> None:
    # Chromium makes its singleton socket's folder (org.chromium.Chromium.XXXXXX) in
    # TMPDIR when it starts: the test process's basetemp (conftest.temp_files_in_basetemp),
    # which pytest removes in its turn, not /tmp, where each run used to leave one.
    assert browser.execute_script("return 1 + 1") == 2
    assert any(tmp_path_factory.getbasetemp().glob("org.chromium.*"))


def test_the_report_draws_in_a_headless_browser(tmp_path: Path, browser: Any) -> None:
    path = tmp_path / "report.html"
    write_html(path, a_result(tmp_path))
    browser.get(path.as_uri())
    # plotly finishes a plot after its newPlot promise settles, which can be after the
    # load event on a busy machine: wait for every chart's legend, not for the page.
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(browser, 120).until(lambda b: b.execute_script("""
        const plots = [...document.querySelectorAll('.js-plotly-plot')];
        return plots.length === 4 && plots.every(el => el._fullLayout &&
            el.querySelectorAll('.legendtext').length > 0);"""))
    drawn = browser.execute_script("""
        return [...document.querySelectorAll('.js-plotly-plot')].map(el => {
          const box = el.getBoundingClientRect();
          return {id: el.id, width: box.width, height: box.height,
                  traces: el.querySelectorAll('g.trace').length,
                  title: (el.querySelector('.gtitle') || {}).textContent || '',
                  xtitle: (el.querySelector('.xtitle') || {}).textContent || '',
                  ytitle: (el.querySelector('.ytitle') || {}).textContent || '',
                  legend: [...el.querySelectorAll('.legendtext')].map(t => t.textContent),
                  shapes: el.querySelectorAll('.shapelayer path').length};
        });""")
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    assert browser.execute_script(
        "return performance.getEntriesByType('resource').length") == 0  # offline
    by_id = {chart["id"]: chart for chart in drawn}
    assert sorted(by_id) == ["activity", "latency", "surface", "throughput"]
    for chart in drawn:
        assert chart["width"] > 300 and chart["height"] > 200, chart
        assert chart["traces"] >= 2 and chart["title"], chart
        assert chart["xtitle"] == "time since the agents started (s)", chart
        assert chart["ytitle"], chart
        assert "actor killed (chaos)" in chart["legend"], chart
        assert chart["shapes"] >= 3, chart  # two kill lines and the node's band
    assert {"p50", "p99"} <= set(by_id["latency"]["legend"])
    assert {"compactions", "conflicts", "errors"} <= set(by_id["activity"]["legend"])
    assert {"events/s", "appends/s"} <= set(by_id["throughput"]["legend"])
    tables = browser.execute_script(
        "return ['config', 'summary', 'shards'].map(id => "
        "document.getElementById(id).innerText)")
    text = "\n".join(tables)
    for python in ("None", "{'", "[]", "True", "False", "_s", "kill_every", "p50':"):
        assert python not in text, python
    assert "Chaos: kill an actor every\t0.7 s" in tables[0]
    assert "Sessions\t3" in tables[0]
    assert "node 0 down (abrupt)" in browser.page_source


def test_report_escapes_what_comes_from_data(tmp_path: Path) -> None:
    result = a_result(tmp_path)
    result.mismatches.append("<script>alert(1)</script>")
    page = render_report(result)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
