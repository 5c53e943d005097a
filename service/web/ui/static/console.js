// The console's only script: live updates over server-sent events, the log tail.
// Pages work without it (reload to update); with it, a page's #live part is fetched
// again (?fragment=1) whenever the server says something changed, and once in a while
// so that ages and durations move.
"use strict";

(function () {
  const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELED"];
  const LOG_EVERY_MS = 3000;
  const TICK_EVERY_MS = 30000;
  const status = () => document.getElementById("live-status");

  function say(text) {
    const el = status();
    if (el) el.textContent = text;
  }

  function withFragment(href) {
    const url = new URL(href, window.location.href);
    url.searchParams.set("fragment", "1");
    return url.toString();
  }

  let refreshing = false;
  let again = false;
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    try {
      const res = await fetch(withFragment(window.location.href),
                              { credentials: "same-origin", cache: "no-store" });
      if (res.status === 401) { window.location.reload(); return; }
      if (res.ok) {
        const live = document.getElementById("live");
        if (live) live.innerHTML = await res.text();  // server-rendered, escaped
        say("updated " + new Date().toLocaleTimeString());
        followLog();
      }
    } catch (err) {
      say("update failed; retrying");
    } finally {
      refreshing = false;
      if (again) { again = false; refresh(); }
    }
  }

  function taskEnded() {
    const el = document.getElementById("task-state");
    return el !== null && TERMINAL.includes(el.textContent.trim());
  }

  let logTimer = null;
  async function loadLog() {
    const pre = document.getElementById("log");
    if (!pre) return;
    try {
      const res = await fetch(pre.dataset.src, { credentials: "same-origin", cache: "no-store" });
      if (res.status === 401) { window.location.reload(); return; }
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = await res.text();  // text, never markup
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    } catch (err) {
      say("log update failed; retrying");
    }
  }

  function followLog() {
    const pre = document.getElementById("log");
    if (!pre) return;
    if (taskEnded()) {
      if (logTimer !== null) { clearInterval(logTimer); logTimer = null; loadLog(); }
      return;
    }
    if (logTimer === null && pre.dataset.follow === "yes") {
      logTimer = setInterval(loadLog, LOG_EVERY_MS);
    }
  }

  function connect() {
    // from the marker the page was rendered at: a change made before the stream
    // started is announced at once
    const since = document.body.dataset.since || "";
    const source = new EventSource("/ui/live?since=" + encodeURIComponent(since));
    source.addEventListener("open", () => say("live"));
    source.addEventListener("change", refresh);
    source.addEventListener("signedout", () => { source.close(); window.location.reload(); });
    source.addEventListener("error", () => {
      // a refused stream (429: too many live pages open) is not retried by the browser:
      // the page keeps its periodic refresh
      if (source.readyState === EventSource.CLOSED) {
        say("live updates unavailable; refreshing every " + TICK_EVERY_MS / 1000 + " s");
      } else {
        say("reconnecting…");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (document.getElementById("log")) { loadLog(); followLog(); }
    if (document.body.dataset.live) {
      connect();
      setInterval(refresh, TICK_EVERY_MS);
    }
  });
})();
