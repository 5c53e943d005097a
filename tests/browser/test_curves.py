"""Progress and training curves in a real headless Chromium, against a real argus-api
(its log follower polling every 0.5 s) on a scripted FakeCluster: a running task's step
lines become a progress bar on the queue and the task page and two curves (a loss and a
reward), which move live as more lines arrive. Screenshots of both pages."""

from __future__ import annotations

import json
import time
import urllib.request

from selenium.webdriver.common.by import By

from service.domain.states import RayStatus, TaskState

from .conftest import TOKEN, Service, wait_for
from .test_console import shot, sid


def submit_steps(service: Service, total: int) -> str:
    text = (f"workload: ppo\ncode_path: {service.shared}/code/verl\n"
            f"model_id: Qwen/Qwen2.5-0.5B-Instruct\n"
            f"train_file: {service.shared}/data/train.parquet\n"
            f"val_file: {service.shared}/data/test.parquet\nnnodes: 1\n"
            f"n_gpus_per_node: 2\ntotal_training_steps: {total}\n")
    request = urllib.request.Request(
        f"{service.url}/api/v2/tasks", data=text.encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())["task_id"]


def steps(first: int, last: int, total: int) -> str:
    return "".join(
        f"(TaskRunner pid=77) step:{s} - actor/pg_loss:{2.0 * 0.93 ** s:.4f} - "
        f"critic/score/mean:{1 - 0.95 ** s:.4f} - perf/throughput:{1500 + s % 7 * 20}\n"
        for s in range(first, last + 1)) if first <= last <= total else ""


def open_signed_in(browser, service: Service, path: str) -> None:
    browser.get(f"{service.url}{path}")
    if "/ui/signin" in browser.current_url:  # this file alone: sign in first
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "signin").click()
        wait_for(path, lambda: browser.current_url == f"{service.url}{path}")


def test_a_running_task_shows_progress_and_curves_live(browser, service, screenshots):
    cluster = service.cluster
    cluster.clock = time.time()
    cluster.add_node("node-curves", gpus=2, cpus=16)
    task_id = submit_steps(service, 40)
    service.wait_state(task_id, TaskState.SUBMITTED)
    cluster.start(sid(task_id), {"node-curves": 2})
    service.wait_state(task_id, TaskState.RUNNING)
    cluster.write_log(sid(task_id), "Total training steps: 40\n" + steps(1, 20, 40))

    open_signed_in(browser, service, f"/ui/tasks/{task_id}")
    wait_for("the task's progress", lambda: "step 20/40 (50%)" in browser.find_element(
        By.ID, "task-progress").text)
    wait_for("two curves", lambda: len(browser.find_elements(
        By.CSS_SELECTOR, "#curves figure.curve polyline.series")) == 2)
    keys = [f.get_attribute("data-key")
            for f in browser.find_elements(By.CSS_SELECTOR, "#curves figure.curve")]
    assert keys == ["actor/pg_loss", "critic/score/mean"]

    browser.execute_script("window.argusNoReload = 'still here'")
    cluster.write_log(sid(task_id), steps(21, 30, 40))
    wait_for("the progress to move live", lambda: "step 30/40 (75%)" in browser.find_element(
        By.ID, "task-progress").text)
    assert browser.execute_script("return window.argusNoReload") == "still here"
    assert "ETA" in browser.find_element(By.ID, "task-progress").text
    shot(browser, screenshots, "07-task-curves")

    open_signed_in(browser, service, "/ui/queue")
    row = browser.find_element(By.ID, f"row-{task_id}")
    assert row.find_element(By.TAG_NAME, "progress").get_attribute("value") == "0.75"
    assert "step 30/40" in row.text
    shot(browser, screenshots, "08-queue-progress")
    cluster.finish(sid(task_id), RayStatus.SUCCEEDED, log=steps(31, 40, 40))
    service.wait_state(task_id, TaskState.SUCCEEDED)


def test_a_short_run_labels_each_step_once(browser, service, screenshots):
    cluster = service.cluster
    cluster.clock = time.time()
    cluster.add_node("node-ticks", gpus=2, cpus=16)
    task_id = submit_steps(service, 4)
    service.wait_state(task_id, TaskState.SUBMITTED)
    cluster.start(sid(task_id), {"node-ticks": 2})
    service.wait_state(task_id, TaskState.RUNNING)
    cluster.write_log(sid(task_id), "Total training steps: 4\n" + steps(1, 4, 4))

    open_signed_in(browser, service, f"/ui/tasks/{task_id}")
    wait_for("step 4 on the page", lambda: "step 4/4" in browser.find_element(
        By.ID, "task-progress").text)
    figures = wait_for("two curves", lambda: (
        found if len(found := browser.find_elements(By.CSS_SELECTOR, "#curves figure.curve"))
        == 2 else None))
    for figure in figures:
        ticks = figure.find_elements(By.CSS_SELECTOR, "text.step-tick")
        assert [t.text for t in ticks] == ["1", "2", "3", "4"]  # was "1 2 2 3 4"
        xs = [t.location["x"] for t in ticks]
        assert xs == sorted(xs) and len(set(xs)) == 4  # drawn left to right, apart
    shot(browser, screenshots, "09-task-curve-ticks")
    cluster.finish(sid(task_id), RayStatus.SUCCEEDED)
    service.wait_state(task_id, TaskState.SUCCEEDED)
