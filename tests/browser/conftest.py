"""The browser tier: a real argus-api (store, scheduler loop, HTTP server) on a scripted
FakeCluster, and a real headless Chromium driven by Selenium through Debian's
chromedriver.

Selenium is given the chromedriver and chromium paths, so it never looks for (or
downloads) a driver of its own. ``scripts/bootstrap.sh`` installs both Debian packages
when it runs as root; without them the tier is skipped with the reason.

Screenshots go to ``$ARGUS_SCREENSHOTS`` (default: ``screenshots/`` under the test run's
temporary folder), one PNG per page, for review.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

from service.cluster.fake import FakeCluster
from service.config import ProgressSettings, SchedulerSettings, Settings
from service.domain.states import TaskState
from service.main import build_service
from service.store.writer import Store

CHROMEDRIVER = os.environ.get("ARGUS_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM = os.environ.get("ARGUS_CHROMIUM", "/usr/bin/chromium")
TOKEN = "browser-tier-t0ken"
DEADLINE_S = 20.0
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1000")


def wait_for(what: str, check: Callable[[], object], timeout_s: float = DEADLINE_S) -> object:
    """Poll ``check`` until it returns something truthy; fail with ``what`` at the deadline.

    The live update swaps parts of the page: an element found a moment ago may be gone
    (stale) or not there yet; both mean "not yet"."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (StaleElementReferenceException, NoSuchElementException) as exc:
            last = type(exc).__name__
            time.sleep(0.05)
            continue
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what} (last: {last!r})")


@dataclass
class Service:
    url: str
    shared: Path
    cluster: FakeCluster
    store: Store  # a second handle on the service's database, for reads

    def state(self, task_id: str) -> TaskState | None:
        task = self.store.tasks.get_task(task_id)
        return None if task is None else task.state

    def wait_state(self, task_id: str, *states: TaskState) -> None:
        wait_for(f"{task_id} in {states}", lambda: self.state(task_id) in states)


def _serve(app: web.Application, started: threading.Event, box: dict[str, object]) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    box["port"] = runner.addresses[0][1]
    box["loop"], box["runner"] = loop, runner
    started.set()
    loop.run_forever()
    loop.close()


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("argus")
    shared = root / "shared"
    settings = Settings(
        shared_root=str(shared), db_path=str(root / "argus.db"), ray_timeout_s=2.0,
        scheduler=SchedulerSettings(tick_s=0.2, max_attempts=1),
        progress=ProgressSettings(poll_s=0.5))
    cluster = FakeCluster(clock=time.time())
    app = build_service(settings, TOKEN, cluster)
    started, box = threading.Event(), {}
    thread = threading.Thread(target=_serve, args=(app, started, box), daemon=True)
    thread.start()
    assert started.wait(30), "argus-api did not start"
    reader = Store(settings.resolved_db_path)
    yield Service(f"http://127.0.0.1:{box['port']}", shared, cluster, reader)
    loop, runner = box["loop"], box["runner"]
    assert isinstance(loop, asyncio.AbstractEventLoop) and isinstance(runner, web.AppRunner)
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    reader.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = Path(os.environ.get("ARGUS_SCREENSHOTS")
               or tmp_path_factory.getbasetemp() / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    missing = [p for p in (CHROMEDRIVER, CHROMIUM) if not shutil.which(p)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian: apt-get install chromium "
                    "chromium-driver; scripts/bootstrap.sh does it as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    profile = tempfile.mkdtemp(prefix="argus-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=DriverService(executable_path=CHROMEDRIVER),
                              options=options)
    driver.set_page_load_timeout(DEADLINE_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
