"""A task's events on its page in a real headless Chromium: every payload field is
``key=value`` with JSON for what is not a plain string (``null``, ``true``, double
quotes), never a Python repr. The payloads come from a real two-stage pipeline on the
fake cluster: the second stage's release records its JobSpec with the first stage's
output resolved (nested, with nulls), its SUBMIT event a boolean. Screenshot."""

from __future__ import annotations

import json
import time
import urllib.request

from selenium.webdriver.common.by import By

from service.domain.states import RayStatus, TaskState

from .conftest import TOKEN, Service, wait_for
from .test_console import shot, sid
from .test_curves import open_signed_in


def submit_two_stages(service: Service) -> dict[str, str]:
    spec = {"workload": "ppo", "code_path": f"{service.shared}/code/verl",
            "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
            "train_file": f"{service.shared}/data/train.parquet",
            "val_file": f"{service.shared}/data/test.parquet", "nnodes": 1,
            "n_gpus_per_node": 1}
    doc = {"name": "events-in-a-browser", "stages": {
        "first": {"jobspec": spec},
        "then": {"after": {"ok": ["first"]},
                 "jobspec": {**spec, "model_id": "{{stages.first.checkpoint_dir}}"}}}}
    request = urllib.request.Request(
        f"{service.url}/api/v2/pipelines", data=json.dumps(doc).encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())["stages"]


def fields(item) -> dict[str, str]:
    """An event's ``key=value`` fields as shown: {key: the text of its value}."""
    return {kv.get_attribute("data-field"): kv.find_element(By.TAG_NAME, "code").text
            for kv in item.find_elements(By.CSS_SELECTOR, "span.kv")}


def events(browser) -> list[tuple[str, dict[str, str]]]:
    return [(item.find_element(By.TAG_NAME, "b").text, fields(item))
            for item in browser.find_elements(By.CSS_SELECTOR, "#events li")]


def test_event_payloads_read_as_fields_with_json_values(browser, service, screenshots):
    cluster = service.cluster
    cluster.clock = time.time()
    cluster.add_node("node-events", gpus=1, cpus=8)
    stages = submit_two_stages(service)
    service.wait_state(stages["first"], TaskState.SUBMITTED)
    cluster.start(sid(stages["first"]), {"node-events": 1})
    cluster.finish(sid(stages["first"]), RayStatus.SUCCEEDED)
    service.wait_state(stages["then"], TaskState.SUBMITTED)

    open_signed_in(browser, service, f"/ui/tasks/{stages['then']}")
    wait_for("the release and submit events", lambda: {"resolved", "already_existed"} <= {
        key for _, f in events(browser) for key in f})
    shown = events(browser)
    created = next(f for kind, f in shown if kind == "CREATED")
    assert (created["state"], created["stage"], created["priority"], created["by"]) == (
        "BLOCKED", "then", "0", "admin")
    release = next(f for _, f in shown if "resolved" in f)
    assert (release["from"], release["to"], release["reason"]) == (
        "BLOCKED", "QUEUED", "dependencies met")
    assert '"after": {"ok": ["' in release["resolved"]
    assert '"max_runtime_s": null' in release["resolved"]
    resolved = json.loads(release["resolved"])  # JSON, not a repr
    assert resolved["after"] == {"ok": [stages["first"]]}
    assert resolved["model_id"].endswith(f"/checkpoints/{stages['first']}")
    assert resolved["nnodes"] == 1 and resolved["overrides"] == []
    submit = next(f for kind, f in shown if kind == "SUBMIT")
    assert (submit["attempt_no"], submit["already_existed"]) == ("1", "false")
    text = browser.find_element(By.ID, "events").text
    assert "None" not in text and "{'" not in text and "True" not in text
    shot(browser, screenshots, "30-task-events")
    cluster.finish(sid(stages["then"]), RayStatus.SUCCEEDED)  # leave nothing running
    service.wait_state(stages["then"], TaskState.SUCCEEDED)
