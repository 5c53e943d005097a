"""The web console in a real headless Chromium, against a real argus-api on a scripted
FakeCluster: sign-in, the queue with three tasks in three states and their reasons, a
state change arriving live, cancel through the button, an override with ``<script>``
shown as text, a priority changed through its form, a node cordoned and resumed through
the cluster page's buttons, sign-out and the redirect of a
signed-out visit. Each page is saved as a screenshot. The tests run in order and share one
browser session (the tier stays short).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By

from service.domain.states import RayStatus, TaskState

from .conftest import TOKEN, Service, wait_for

SCRIPT = "<script>alert(1)</script>"
TASKS: dict[str, str] = {}


def submit(service: Service, gpus: int, *overrides: str) -> str:
    text = (f"workload: ppo\ncode_path: {service.shared}/code/verl\n"
            f"model_id: Qwen/Qwen2.5-0.5B-Instruct\n"
            f"train_file: {service.shared}/data/train.parquet\n"
            f"val_file: {service.shared}/data/test.parquet\nnnodes: 1\n"
            f"n_gpus_per_node: {gpus}\n")
    if overrides:
        text += "overrides:\n" + "".join(f"  - {json.dumps(o)}\n" for o in overrides)
    request = urllib.request.Request(
        f"{service.url}/api/v2/tasks", data=text.encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())["task_id"]


def sid(task_id: str) -> str:
    return f"{task_id}--a01"


def shot(browser, screenshots: Path, name: str) -> None:
    browser.save_screenshot(str(screenshots / f"{name}.png"))


def row_state(browser, task_id: str) -> str | None:
    rows = browser.find_elements(By.ID, f"row-{task_id}")
    return rows[0].get_attribute("data-state") if rows else None


def test_signed_out_visit_redirects_to_sign_in(browser, service, screenshots):
    browser.get(f"{service.url}/ui/queue")
    assert browser.current_url.startswith(f"{service.url}/ui/signin?next=")
    assert browser.find_element(By.ID, "token").get_attribute("type") == "password"
    shot(browser, screenshots, "01-signin")


def test_sign_in(browser, service, screenshots):
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "signin").click()
    wait_for("the queue page", lambda: browser.current_url == f"{service.url}/ui/queue")
    assert TOKEN not in browser.page_source and TOKEN not in browser.current_url
    cookie = browser.get_cookie("argus_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == ""  # no script reads it


def test_queue_shows_three_states_with_reasons(browser, service, screenshots):
    cluster = service.cluster
    cluster.clock = time.time()
    cluster.add_node("node-a", gpus=4, cpus=32)
    TASKS["failed"] = submit(service, 2)
    service.wait_state(TASKS["failed"], TaskState.SUBMITTED)
    cluster.finish(sid(TASKS["failed"]), RayStatus.FAILED, message="driver exited 1",
                   log="Traceback (most recent call last):\nValueError: bad learning rate\n")
    service.wait_state(TASKS["failed"], TaskState.FAILED)
    TASKS["running"] = submit(service, 4)
    service.wait_state(TASKS["running"], TaskState.SUBMITTED)
    cluster.start(sid(TASKS["running"]), {"node-a": 4})
    service.wait_state(TASKS["running"], TaskState.RUNNING)
    TASKS["pending"] = submit(service, 2)
    service.wait_state(TASKS["pending"], TaskState.PENDING_RESOURCES)

    browser.get(f"{service.url}/ui/queue")
    assert row_state(browser, TASKS["running"]) == "RUNNING"
    assert row_state(browser, TASKS["pending"]) == "PENDING_RESOURCES"
    assert row_state(browser, TASKS["failed"]) == "FAILED"
    pending = browser.find_element(By.ID, f"row-{TASKS['pending']}").text
    assert "needs 1x2 GPUs" in pending and "resources" in pending
    failed = browser.find_element(By.ID, f"row-{TASKS['failed']}").text
    assert "bad learning rate" in failed or "driver exited 1" in failed
    running = browser.find_element(By.ID, f"row-{TASKS['running']}").text
    assert "holds 4 of 4 GPUs" in running
    shot(browser, screenshots, "02-queue")


def test_a_state_change_appears_without_reload(browser, service, screenshots):
    browser.execute_script("window.argusNoReload = 'still here'")
    service.cluster.clock = time.time()
    service.cluster.finish(sid(TASKS["running"]), RayStatus.SUCCEEDED, log="done\n")
    wait_for("the finished task to move live",
             lambda: row_state(browser, TASKS["running"]) == "SUCCEEDED")
    wait_for("the pending task to be admitted live",
             lambda: row_state(browser, TASKS["pending"]) in ("SUBMITTED", "RUNNING"))
    assert browser.execute_script("return window.argusNoReload") == "still here"
    shot(browser, screenshots, "03-queue-live")


def test_cancel_through_the_button(browser, service, screenshots):
    task_id = TASKS["pending"]
    service.cluster.start(sid(task_id), {"node-a": 2})
    service.cluster.write_log(sid(task_id), "step 1: loss 0.93\nstep 2: loss 0.88\n")
    service.wait_state(task_id, TaskState.RUNNING)
    browser.get(f"{service.url}/ui/tasks/{task_id}")
    wait_for("the live log tail",
             lambda: "loss 0.88" in browser.find_element(By.ID, "log").text)
    shot(browser, screenshots, "04-task-running")
    browser.find_element(By.ID, "cancel").click()
    wait_for("the confirmation page", lambda: browser.current_url.endswith("/cancel"))
    shot(browser, screenshots, "05-cancel-confirm")
    browser.find_element(By.ID, "confirm-cancel").click()
    service.wait_state(task_id, TaskState.CANCELED)
    wait_for("CANCELED on the task page",
             lambda: browser.find_element(By.ID, "task-state").text == "CANCELED")
    assert "CANCEL_REQUESTED" in browser.find_element(By.ID, "events").text
    shot(browser, screenshots, "06-task-canceled")


def test_an_override_with_script_renders_as_text(browser, service, screenshots):
    task_id = submit(service, 8, f"+trainer.note={SCRIPT}")
    browser.get(f"{service.url}/ui/tasks/{task_id}")
    assert SCRIPT in browser.find_element(By.ID, "jobspec").text  # shown, as text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 (the property raises when none)
    inline = browser.execute_script(
        "return [...document.scripts].filter(s => !s.src).length")
    assert inline == 0
    shot(browser, screenshots, "07-task-script-override")


def test_priority_through_the_form(browser, service, screenshots):
    task_id = submit(service, 8)  # never fits: it keeps waiting
    browser.get(f"{service.url}/ui/tasks/{task_id}")
    assert browser.find_element(By.ID, "task-priority").text.startswith("0")
    browser.find_element(By.ID, "change-priority").click()
    wait_for("the priority form", lambda: browser.current_url.endswith("/priority"))
    field = browser.find_element(By.ID, "priority")
    field.clear()
    field.send_keys("50")
    shot(browser, screenshots, "08-priority-form")
    browser.find_element(By.ID, "confirm-priority").click()
    wait_for("the new priority on the task page",
             lambda: browser.current_url.endswith(task_id)
             and browser.find_element(By.ID, "task-priority").text.startswith("50"))
    assert "PRIORITY_CHANGED" in browser.find_element(By.ID, "events").text
    shot(browser, screenshots, "09-task-priority")


def test_cluster_and_charts_pages(browser, service, screenshots):
    browser.get(f"{service.url}/ui/cluster")
    assert "reachable" in browser.find_element(By.ID, "ray-status").text
    assert "node-a" in browser.find_element(By.ID, "nodes").text
    shot(browser, screenshots, "10-cluster")
    browser.get(f"{service.url}/ui/charts")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart")) == 4
    shot(browser, screenshots, "11-charts")


def _node_cell(browser, node: str) -> str:
    rows = browser.find_elements(By.ID, f"node-{node}")
    return rows[0].text if rows else ""


def test_cordon_then_resume_a_node_through_the_buttons(browser, service, screenshots):
    browser.get(f"{service.url}/ui/cluster")
    assert "schedulable" in _node_cell(browser, "node-a")
    browser.find_element(By.CSS_SELECTOR, '#node-node-a a[href$="/cordon"]').click()
    wait_for("the cordon form", lambda: browser.current_url.endswith("/nodes/node-a/cordon"))
    browser.find_element(By.ID, "node-reason").send_keys("fan <b>noise</b>")
    shot(browser, screenshots, "12-node-cordon-form")
    browser.find_element(By.ID, "confirm-node-cordon").click()
    wait_for("the cluster page with node-a cordoned", lambda: browser.current_url.endswith(
        "/ui/cluster") and "cordoned by admin" in _node_cell(browser, "node-a"))
    assert "fan <b>noise</b>" in _node_cell(browser, "node-a")  # the reason, as text
    assert not browser.find_elements(By.CSS_SELECTOR, '#node-node-a a[href$="/cordon"]')
    shot(browser, screenshots, "13-node-cordoned")
    browser.find_element(By.CSS_SELECTOR, '#node-node-a a[href$="/resume"]').click()
    wait_for("the resume form", lambda: browser.current_url.endswith("/nodes/node-a/resume"))
    assert "NODE_CORDONED" in browser.find_element(By.ID, "node-events").text
    browser.find_element(By.ID, "confirm-node-resume").click()
    wait_for("node-a schedulable again", lambda: browser.current_url.endswith("/ui/cluster")
             and "schedulable" in _node_cell(browser, "node-a"))
    shot(browser, screenshots, "14-node-resumed")


def test_sign_out_then_a_visit_redirects(browser, service, screenshots):
    browser.get(f"{service.url}/ui/queue")
    browser.find_element(By.ID, "signout").click()
    wait_for("the sign-in page", lambda: "/ui/signin" in browser.current_url)
    browser.get(f"{service.url}/ui/tasks/{TASKS['failed']}")
    assert browser.current_url.startswith(f"{service.url}/ui/signin?next=")
    shot(browser, screenshots, "15-signed-out")
