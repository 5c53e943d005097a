"""The console's cluster page (nodes, the Ray head's record, what runs) and charts page
(queue and GPU use over the last day, GPU-hours per user)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.cluster.address import parse_record, read_file
from service.engine.observed import total_of
from service.usecases import cluster, queue
from service.usecases import nodes as node_cases
from service.web.api.deps import deps_of
from service.web.leadership import leadership
from service.web.ui import charts
from service.web.ui.pages import (
    held_gpus,
    render,
    signed_in,
)

CHART_WINDOW_S = 24 * 3600.0
USAGE_WINDOW_S = 7 * 24 * 3600.0


def _head(path: str, now: float) -> dict[str, Any]:
    """head.json as the service reads it: generation, age, or why it cannot be read."""
    try:
        text, mtime = read_file(path)
        record = parse_record(text)
    except (OSError, ValueError) as exc:
        return {"path": path, "error": str(exc)}
    return {"path": path, "error": None, "generation": record.generation, "seq": record.seq,
            "head_ip": record.head_ip, "age_s": now - record.written_at,
            "ttl_s": record.ttl_s, "stale": now - record.written_at > record.ttl_s,
            "mtime": mtime}


@signed_in
async def cluster_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    now = deps.clock()
    seen = deps.metrics.observed.last
    alive = {} if seen is None or seen.snapshot is None else {
        n.display_name: n for n in seen.snapshot.nodes}
    nodes = []
    for view in await node_cases.list_nodes(deps, list(alive.values()) if alive else None):
        n = alive.get(view.name)
        nodes.append({
            "view": view, "id": view.node_id or "", "ip": view.node_ip or "",
            "name": view.name, "gpus_free": view.gpus_free or 0.0,
            "gpus_total": view.gpus_total or 0.0,
            "cpus_free": n.get("CPU") if n else None,
            "cpus_total": total_of(n, "CPU") if n else None})
    head = None
    if deps.settings.head_json:
        head = await deps.work.run(_head, deps.settings.head_json, now)
    active = await queue.active_tasks(deps)
    return render(
        request, "_cluster.html" if request.query.get("fragment") else "cluster.html",
        nav="cluster", seen=seen, nodes=nodes, head=head, active=active, held=held_gpus(deps),
        ray_address=deps.settings.ray_address,
        instance=None if deps.lease is None else leadership(deps.lease))


# -- charts ----------------------------------------------------------------------------------


@signed_in
async def charts_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    now = deps.clock()
    start = now - CHART_WINDOW_S
    samples = await cluster.samples_since(deps, start)
    used = await cluster.gpu_seconds(deps, now - USAGE_WINDOW_S, now, now)
    util = [(s.ts, None if not s.gpus_total else 100.0 * (s.gpus_used or 0) / s.gpus_total)
            for s in samples]
    bars = sorted(((user or "(no owner)", seconds / 3600) for user, seconds in used.items()),
                  key=lambda b: -b[1])
    return render(
        request, "charts.html", nav="charts", samples=len(samples),
        queue_chart=charts.line_chart([(s.ts, s.pending) for s in samples], start=start,
                                      end=now, title="Pending tasks, last 24 h"),
        running_chart=charts.line_chart([(s.ts, s.running) for s in samples], start=start,
                                        end=now, title="Running tasks, last 24 h"),
        gpu_chart=charts.line_chart(util, start=start, end=now, unit="%", y_max=100.0,
                                    title="GPUs allocated, % of all, last 24 h"),
        usage_chart=charts.bar_chart(bars, unit=" h", title="GPU-hours per user, last 7 days"))
