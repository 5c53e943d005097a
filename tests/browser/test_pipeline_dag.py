"""The pipeline page in a real headless Chromium, against a real argus-api on the fake
cluster: the DAG's stage boxes coloured by state, an edge labelled with its condition, a
stage's state changing live (no reload), a box leading to its task page. Screenshot."""

from __future__ import annotations

import json
import time
import urllib.request

from selenium.webdriver.common.by import By

from service.domain.states import RayStatus, TaskState

from .conftest import TOKEN, Service, wait_for
from .test_console import shot, sid
from .test_curves import open_signed_in


def submit_pipeline(service: Service) -> dict:
    spec = {"workload": "ppo", "code_path": f"{service.shared}/code/verl",
            "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
            "train_file": f"{service.shared}/data/train.parquet",
            "val_file": f"{service.shared}/data/test.parquet", "nnodes": 1,
            "n_gpus_per_node": 2}
    doc = {"name": "dag-in-a-browser", "stages": {
        "sft": {"jobspec": spec},
        "ppo": {"after": {"ok": ["sft"]},
                "jobspec": {**spec, "model_id": "{{stages.sft.checkpoint_dir}}"}},
        "eval": {"after": {"any": ["ppo"]}, "jobspec": spec}}}
    request = urllib.request.Request(
        f"{service.url}/api/v2/pipelines", data=json.dumps(doc).encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def box_state(browser, stage: str) -> str | None:
    boxes = browser.find_elements(By.ID, f"stage-{stage}")
    return boxes[0].get_attribute("data-state") if boxes else None


def test_the_dag_page_shows_stages_edges_and_changes_live(browser, service, screenshots):
    cluster = service.cluster
    cluster.clock = time.time()
    cluster.add_node("node-dag", gpus=2, cpus=16)
    created = submit_pipeline(service)
    stages = created["stages"]
    service.wait_state(stages["sft"], TaskState.SUBMITTED)
    open_signed_in(browser, service, f"/ui/pipelines/{created['pipeline_id']}")
    wait_for("the stage boxes", lambda: box_state(browser, "sft") == "SUBMITTED")
    assert box_state(browser, "ppo") == box_state(browser, "eval") == "BLOCKED"
    edges = browser.find_elements(By.CSS_SELECTOR, "#dag g.edge")
    assert sorted(e.get_attribute("data-condition") for e in edges) == ["any", "ok"]
    assert {e.text for e in edges} == {"ok", "any"}  # the labels are drawn
    rect = browser.find_element(By.CSS_SELECTOR, "#stage-ppo rect")
    assert rect.get_attribute("fill") == "#f1ecfb"  # BLOCKED's colour
    assert rect.size["width"] > 100 and rect.size["height"] > 30  # really laid out
    shot(browser, screenshots, "20-pipeline-dag")

    browser.execute_script("window.argusNoReload = 'still here'")
    cluster.clock = time.time()
    cluster.start(sid(stages["sft"]), {"node-dag": 2})
    cluster.finish(sid(stages["sft"]), RayStatus.SUCCEEDED)
    wait_for("sft to turn SUCCEEDED and ppo to start, live",
             lambda: box_state(browser, "sft") == "SUCCEEDED"
             and box_state(browser, "ppo") in ("SUBMITTED", "RUNNING"))
    assert browser.execute_script("return window.argusNoReload") == "still here"
    assert browser.find_element(By.CSS_SELECTOR, "#stage-sft rect").get_attribute(
        "fill") == "#e3f4ea"
    shot(browser, screenshots, "21-pipeline-dag-live")

    browser.find_element(By.CSS_SELECTOR, "#stage-ppo rect").click()
    wait_for("the stage's task page",
             lambda: browser.current_url.endswith(f"/ui/tasks/{stages['ppo']}"))
    assert "(stage ppo)" in browser.find_element(By.ID, "task-pipeline").find_element(
        By.XPATH, "..").text
    cluster.finish(sid(stages["ppo"]), RayStatus.FAILED)  # leave nothing running
    service.wait_state(stages["eval"], TaskState.SUBMITTED)
    cluster.finish(sid(stages["eval"]), RayStatus.SUCCEEDED)
