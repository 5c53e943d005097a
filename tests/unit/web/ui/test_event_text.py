"""An event's payload on the task page: ``key=value`` fields, JSON for anything that is
not a plain string (never a Python repr), escaped by the page's template."""

from __future__ import annotations

import pytest

from service.web.ui.event_text import payload_fields, value_text
from service.web.ui.pages import make_env


@pytest.mark.parametrize(("value", "text"), [
    ("cancelled by alice", "cancelled by alice"),
    ("", '""'),
    (None, "null"),
    (True, "true"),
    (False, "false"),
    (0, "0"),
    (5400.5, "5400.5"),
    (["t-1", "t-2"], '["t-1", "t-2"]'),
    ({"ok": ["t-1"], "any": []}, '{"ok": ["t-1"], "any": []}'),
    ({"max_runtime_s": None, "nested": {"x": False}},
     '{"max_runtime_s": null, "nested": {"x": false}}'),
    ("déjà vu", "déjà vu"),
    ({"path": "/private/ü"}, '{"path": "/private/ü"}'),
])
def test_value_text_is_the_string_or_json(value, text) -> None:
    assert value_text(value) == text


def test_payload_fields_keep_the_payload_order() -> None:
    payload = {"from": "BLOCKED", "to": "QUEUED", "reason": "dependencies met",
               "resolved": {"after": {"ok": ["t-1"]}, "max_runtime_s": None}}
    assert payload_fields(payload) == [
        ("from", "BLOCKED"), ("to", "QUEUED"), ("reason", "dependencies met"),
        ("resolved", '{"after": {"ok": ["t-1"]}, "max_runtime_s": null}')]
    assert payload_fields({}) == payload_fields(None) == []


def test_the_console_filter_renders_fields_escaped() -> None:
    template = make_env().from_string(
        "{% for k, v in p|payload_fields %}{{ k }}=<code>{{ v }}</code> {% endfor %}")
    html = template.render(p={"by": None, "note": "<b>", "spec": {"q": 'a"b'}})
    assert html == ('by=<code>null</code> note=<code>&lt;b&gt;</code> '
                    'spec=<code>{&#34;q&#34;: &#34;a\\&#34;b&#34;}</code> ')
