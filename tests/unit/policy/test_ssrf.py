"""The SSRF rules: which addresses and URLs a webhook may target (table-driven)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from service.policy.ssrf import address_problem, embedded_ipv4, target_problem, url_problem
from service.webhooks.transport import BlockedAddress, GuardedResolver, registration_problem

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)

REFUSED = [  # (address, the category named)
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"),
    ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.254", "carrier-grade NAT"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.251", "multicast"), ("239.1.2.3", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("fc00::1", "unique-local"), ("fd12:3456::1", "unique-local"),
    ("fec0::1", "site-local"),
    ("192.0.2.10", "private"), ("198.18.0.1", "private"), ("240.0.0.1", "private"),
    ("255.255.255.255", "private"),
    # IPv6 forms of IPv4 addresses are judged by the IPv4 address
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "link-local"), ("::127.0.0.1", "loopback"),
    ("64:ff9b::a00:1", "private"), ("2002:a00:1::", "private"),
    ("2002:7f00:1::", "loopback"),
]
ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111",
           "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "category"), REFUSED)
def test_non_public_addresses_are_refused_saying_why(address: str, category: str) -> None:
    problem = address_problem(ipaddress.ip_address(address))
    assert problem is not None and f"is {category};" in problem, problem
    assert "v2.webhooks.allow_networks" in problem


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(("address", "allowed"), [
    ("127.0.0.1", True), ("::ffff:127.0.0.1", True), ("127.9.9.9", True),
    ("::1", False), ("10.0.0.1", False), ("169.254.169.254", False),
])
def test_an_allowed_network_lets_its_addresses_through(address: str, allowed: bool) -> None:
    assert (address_problem(ipaddress.ip_address(address), LOOPBACK) is None) is allowed


def test_embedded_ipv4_of_each_form() -> None:
    cases = {"::ffff:1.2.3.4": "1.2.3.4", "::1.2.3.4": "1.2.3.4", "64:ff9b::102:304": "1.2.3.4",
             "2002:102:304::1": "1.2.3.4", "2001:db8::1": None, "::1": None, "1.2.3.4": None}
    for address, inner in cases.items():
        got = embedded_ipv4(ipaddress.ip_address(address))
        assert (None if got is None else str(got)) == inner, address


@pytest.mark.parametrize(("url", "problem"), [
    ("https://hooks.example.com/x", None),
    ("http://hooks.example.com:8080/a?b=c", None),
    ("ftp://hooks.example.com/x", "scheme must be http or https"),
    ("file:///etc/passwd", "scheme must be http or https"),
    ("gopher://127.0.0.1:25/", "scheme must be http or https"),
    ("https:///nohost", "has no host"),
    ("https://user:pw@hooks.example.com/", "must not carry credentials"),
    ("https://hooks.example.com:99999/", "is not a valid URL"),
    ("https://hooks.example.com:0/", "port 0"),
    ("https://hooks.example.com/a b", "spaces or control characters"),
    ("https://hooks.example.com/\r\nX-Injected: 1", "spaces or control characters"),
    ("https://hooks.example.com/" + "a" * 2100, "at most 2048"),
    ("", "must be an http or https URL"),
    (None, "must be an http or https URL"),
    (["https://x"], "must be an http or https URL"),
])
def test_url_form(url: object, problem: str | None) -> None:
    got = url_problem(url)
    assert (got is None) if problem is None else (got is not None and problem in got), got


@pytest.mark.parametrize(("url", "allowed"), [
    ("http://127.0.0.1:8265/api/jobs/", False), ("http://[::1]/", False),
    ("http://[::ffff:127.0.0.1]/", False), ("http://169.254.169.254/latest/", False),
    ("http://10.1.2.3/", False), ("https://93.184.215.14/hook", True),
    ("http://[2606:4700:4700::1111]/", True),
])
def test_ip_literals_are_judged_without_resolution(url: str, allowed: bool) -> None:
    assert (target_problem(url) is None) is allowed


class FakeResolver:
    """A DNS that answers what the test says (a rebinding attacker's, say)."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        return [{"hostname": host, "host": a, "port": port, "family": family, "proto": 0,
                 "flags": 0} for a in self.answers]

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(("answers", "allow", "refused"), [
    (["93.184.215.14"], (), False),
    (["127.0.0.1"], (), True),                       # rebinding to loopback
    (["93.184.215.14", "10.0.0.7"], (), True),       # one bad address spoils the name
    (["::ffff:169.254.169.254"], (), True),
    (["127.0.0.1"], LOOPBACK, False),
])
def test_the_delivery_resolver_refuses_disallowed_addresses(answers, allow, refused) -> None:
    resolver = GuardedResolver(allow, FakeResolver(answers))  # type: ignore[arg-type]
    if refused:
        with pytest.raises(BlockedAddress, match=r"hooks\.example\.com"):
            asyncio.run(resolver.resolve("hooks.example.com", 443))
    else:
        assert asyncio.run(resolver.resolve("hooks.example.com", 443))[0]["host"] == answers[0]


def test_registration_resolves_names_and_checks_every_address() -> None:
    problem = asyncio.run(registration_problem("http://localhost:9/x", ()))
    assert problem is not None and "localhost" in problem and "loopback" in problem
    both = (*LOOPBACK, ipaddress.ip_network("::1/128"))
    assert asyncio.run(registration_problem("http://localhost:9/x", both)) is None
    unresolvable = asyncio.run(registration_problem("http://no-such-host.invalid/x", ()))
    assert unresolvable is not None and "does not resolve" in unresolvable
