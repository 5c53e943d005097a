"""A webhook URL's host: one wire form judged, looked up and connected to; every malformed
host a refusal saying why, never an exception (tables, then properties over any string).

The properties run the registration's whole check (``service.usecases.webhooks.register``) with the
resolver stubbed: whatever the string, it is accepted or refused with a 400 naming
``url``, never an exception that would be a 500."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import string
from types import SimpleNamespace
from typing import Any

import pytest
import yarl
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from service.domain.rows import WebhookRow
from service.policy.ssrf import BadHost, target_problem, url_problem, wire_host, wire_url
from service.usecases.ports import Rejected
from service.usecases.webhooks import register
from service.webhooks.settings import WebhookSettings

LONG_NAME = ".".join(["a" * 63] * 4)  # 255 characters


@pytest.mark.parametrize(("host", "why"), [
    ("a..b", "has an empty label"),
    ("169.254.169.254.\u3002", "has an empty label"),  # a dot, then an ideographic one
    (".a", "has an empty label"),
    ("a.b..", "has an empty label"),
    (".", "has an empty label"),
    ("a\u3002\u3002b", "has an empty label"),
    ("a" * 64 + ".example", "has a label longer than 63 characters"),
    ("\u00e9" * 60 + ".example", "not a valid international name"),  # 63+ once encoded
    (LONG_NAME, "is longer than 253 characters"),
    ("a!b.example", "may hold only letters, digits, '-' and '_'"),
    ("a%2eb.example", "may hold only letters, digits, '-' and '_'"),
    ("a\ufe52b.example", "not a valid international name"),  # a small full stop
    ("xn--zz.example", "not a valid IDNA A-label"),
    ("\udcff.example", "not a valid international name"),
    ("\u0661\u0662.example", "not a valid international name"),  # bidi rules
    ("a\u200db.example", "not a valid international name"),  # a joiner out of context
    ("\u200b", "not a valid international name"),  # maps to nothing
    ("2130706433", "no IPv4 address in dotted-decimal form"),  # inet_aton: 127.0.0.1
    ("0x7f.1", "no IPv4 address in dotted-decimal form"),
    ("127.1", "no IPv4 address in dotted-decimal form"),
    ("0177.0.0.1", "no IPv4 address in dotted-decimal form"),
    ("1.2.3.4.5", "no IPv4 address in dotted-decimal form"),
    ("zz::1", "is not a valid IPv6 address"),
    ("", "has no host"),
])
def test_malformed_hosts_are_refused_saying_why(host: str, why: str) -> None:
    with pytest.raises(BadHost) as caught:
        wire_host(host)
    assert why in str(caught.value), caught.value


@pytest.mark.parametrize(("host", "wire"), [
    ("hooks.example.com", "hooks.example.com"),
    ("Hooks.Example.COM", "hooks.example.com"),
    ("hooks.example.com.", "hooks.example.com."),  # the root's dot is kept
    ("a_b-c.example", "a_b-c.example"),
    ("\uff41.example", "a.example"),  # full-width letters
    ("m\u00fcnchen.de", "xn--mnchen-3ya.de"),
    ("stra\u00dfe.de", "xn--strae-oqa.de"),  # IDNA 2008: not strasse.de
    ("xn--mnchen-3ya.de", "xn--mnchen-3ya.de"),
    ("hooks\u3002example\uff0ecom\uff61", "hooks.example.com."),  # the dots IDNA reads as "."
    ("169\u3002254\u3002169\u3002254", "169.254.169.254"),  # an IP literal after all
    ("127\uff0e0\uff0e0\uff0e1", "127.0.0.1"),
    ("169.254.169.254.", "169.254.169.254"),
    ("::ffff:127.0.0.1", "::ffff:7f00:1"),
    ("1.2.3.4", "1.2.3.4"),
    ("a" * 63 + ".example", "a" * 63 + ".example"),
])
def test_hosts_in_their_wire_form(host: str, wire: str) -> None:
    assert wire_host(host) == wire


@pytest.mark.parametrize(("url", "problem"), [
    ("http://a..b/", "host 'a..b' has an empty label"),
    ("http://169.254.169.254.\u3002/", "has an empty label"),
    ("http://169\u3002254\u3002169\u3002254/latest/", "address 169.254.169.254 is link-local"),
    ("http://127\uff0e0\uff0e0\uff0e1:8265/api/jobs/", "address 127.0.0.1 is loopback"),
    ("http://169.254.169.254./", "address 169.254.169.254 is link-local"),
    ("https://m\u00fcnchen.de/hook", None),
])
def test_urls_are_judged_by_their_wire_host(url: str, problem: str | None) -> None:
    got = target_problem(url)
    assert (got is None) if problem is None else (got is not None and problem in got), got


def test_the_wire_url_changes_only_the_host() -> None:
    assert wire_url("https://M\u00fcnchen.de:8443/a/b?c=d#e") == (
        "https://xn--mnchen-3ya.de:8443/a/b?c=d#e")
    assert wire_url("http://127\u30020\u30020\u30021:9/hook") == "http://127.0.0.1:9/hook"
    assert wire_url("http://[::FFFF:127.0.0.1]/") == "http://[::ffff:7f00:1]/"
    assert wire_url("http://hooks.example.com/x") == "http://hooks.example.com/x"


# -- properties: any string as a URL ----------------------------------------------------

HOST_CHARS = (string.ascii_letters + string.digits + "-_.:%[]!@*"
              + "\u3002\uff0e\uff61\ufe52\u2024\u00df\u00e9\u00fc\uff41\u0661\u200b\u200d"
              + "\u00ad\udcff\u2488\u24d0")
hosts = st.one_of(
    st.text(alphabet=HOST_CHARS, max_size=80),
    st.lists(st.text(alphabet=HOST_CHARS, min_size=0, max_size=70), max_size=6).map(
        ".".join),
    st.text(max_size=40),
    st.lists(st.text(alphabet=string.ascii_lowercase + string.digits + "-_\u00e9\u00df\uff41",
                     min_size=1, max_size=12), min_size=1, max_size=4).map(".".join),
)
urls = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=120),  # surrogates too
    st.builds(lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
              st.sampled_from(["http", "https", "HTTP", "ftp"]), hosts,
              st.sampled_from(["", ":80", ":0", ":99999", ":x", ":"]),
              st.one_of(st.sampled_from(["", "/", "/hook?a=b", "/\u00e9", "#f", "/\ud800",
                                         "/a?\udcff#x"]),
                        st.text(alphabet=st.characters(exclude_categories=()),
                                max_size=20).map("/".__add__))),
)


@settings(max_examples=400, deadline=None)
@given(urls)
@example("http://a..b/")
@example("http://169.254.169.254.\u3002/")
@example("http://[::1/")
@example("http://\udcff/")
def test_no_string_breaks_the_url_rules(url: str) -> None:
    """``url_problem`` and ``target_problem`` answer for any string; what they accept has
    a wire form every later step takes: ASCII for the resolver, unchanged by yarl."""
    problem = url_problem(url)
    assert problem is None or isinstance(problem, str)
    target = target_problem(url)
    assert target is None or isinstance(target, str)
    if problem is not None:
        return
    url.encode("utf-8")  # what the store and the HTTP client need
    sent = wire_url(url)
    host = yarl.URL(sent).raw_host
    assert host is not None and host.isascii()
    host.encode("idna")  # what getaddrinfo does to a str host
    wire = wire_host(host)
    assert wire == host or (":" in host and ipaddress.ip_address(host) == ipaddress.ip_address(
        wire))


class _Webhooks:
    def create_webhook(self, *, owner: str, url: str, events: list[str], fmt: str,
                       now: float, max_per_user: int) -> WebhookRow:
        url.encode("utf-8")  # as SQLite does: a lone surrogate was a 500
        return WebhookRow("wh_1", owner, url, tuple(events), fmt, "whsec_x", now)


class _Store:
    """The async store's write lane, over a fake webhooks store."""

    webhooks = _Webhooks()

    async def write(self, fn: Any) -> Any:
        return fn(self)


async def _public(self: Any, host: str, port: Any, **_: Any) -> list[Any]:
    assert isinstance(host, str) and host.isascii(), host  # never the resolver's IDNA
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 80))]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(urls)
@example("http://a..b/")
@example("http://169.254.169.254.\u3002/")
@example("http://169\u3002254\u3002169\u3002254/")
@example("https://93.184.215.14/\ud800")
def test_registration_accepts_or_refuses_any_string_naming_the_url(
        monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", _public)
    deps = SimpleNamespace(settings=SimpleNamespace(webhooks=WebhookSettings()),
                           store=_Store(), clock=lambda: 0.0)
    try:
        asyncio.run(register(deps, "alice", {"url": url,  # type: ignore[arg-type]
                                             "events": ["task.failed"]}))
    except Rejected as exc:  # a 400
        assert [d["field"] for d in exc.details] == ["url"], exc.details
