"""Progress and curves on real Ray: the stand-in prints verl's step lines, the service's log
follower reads them through the real adapter (``RayCluster.log_since``) while the job runs,
and the task JSON, the queue and the curves endpoint show them."""

from __future__ import annotations

from .conftest import ensure_workers

STEPS = 8


def test_a_running_task_shows_progress_then_its_curves(ray_cluster, argus):
    ensure_workers(ray_cluster, 1)
    tid = argus.submit(gpus=2, duration_s=STEPS, total_training_steps=STEPS)
    running = argus.wait_for(
        tid, lambda t: t["state"] == "RUNNING" and (t["progress"] or {}).get("step"), 90,
        "to show a step while it runs")
    p = running["progress"]
    assert p["total_steps"] == STEPS and 1 <= p["step"] <= STEPS and p["attempt_no"] == 1
    queue = argus.http.get(f"{argus.url}/api/v2/queue", timeout=10).json()
    mine = [t for t in queue["running"] if t["task_id"] == tid]
    assert not mine or mine[0]["progress"]["total_steps"] == STEPS  # unless it just ended
    argus.wait_for(tid, lambda t: t["state"] != "RUNNING"
                   or (t["progress"] or {}).get("rate_steps_per_s"), 60, "to show a rate")
    argus.wait_state(tid, "SUCCEEDED", timeout=60)
    # the last lines come from the archived log, at the follower's next poll
    done = argus.wait_for(tid, lambda t: t["progress"]["step"] == STEPS, 10, "its last step")
    assert done["progress"]["fraction"] == 1.0
    assert done["progress"]["eta_s"] is None  # no pace once it ended
    r = argus.http.get(f"{argus.url}/api/v2/tasks/{tid}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    curves = r.json()
    assert [s["key"] for s in curves["series"]] == ["train/loss", "critic/score/mean"]
    loss = curves["series"][0]
    assert loss["steps"] == list(range(1, STEPS + 1))
    assert loss["values"] == sorted(loss["values"], reverse=True)  # the stand-in's loss falls
    # read through Ray's log-tail stream, never the whole log (ray_logtail logs a fallback)
    assert "log tail of" not in argus.log_tail(100_000), argus.log_tail()
