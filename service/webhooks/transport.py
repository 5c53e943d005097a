"""The webhooks' HTTP client: it connects only to addresses the SSRF rules allow.

aiohttp resolves a host name through the connector's resolver and connects to the very
addresses the resolver returned, so ``GuardedResolver`` checks each of them
(``ssrf.address_problem``) and refuses the name when any is not allowed: a name that
resolves to a public address at registration and to 127.0.0.1 at delivery (DNS
rebinding) is refused at delivery. An IP literal never reaches a resolver; ``send``
checks it first. The host is judged, resolved and connected to in one form
(``ssrf.wire_host``): ``send`` posts to the URL rebuilt with it, so aiohttp has nothing
left to rewrite (``http://127。0。0。1/`` is checked and sent as 127.0.0.1), and a host
with no such form is a refused delivery, never an exception. Redirects are not followed,
proxies from the environment are not used (``trust_env`` off), each try has a total
timeout, and at most ``MAX_RESPONSE_BYTES`` of an answer are read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from service.policy.ssrf import IPNetwork, address_problem, target_problem, wire_host, wire_url
from service.webhooks.policy import TryResult

MAX_RESPONSE_BYTES = 64 * 1024
MAX_RETRY_AFTER_S = 86400.0
RESOLVE_TIMEOUT_S = 5.0  # a registration waits at most this long for DNS


class BlockedAddress(OSError):
    """A host name resolved to an address the SSRF rules refuse."""


class GuardedResolver(AbstractResolver):
    """A resolver that refuses names resolving to any address not allowed."""

    def __init__(self, allow: Sequence[IPNetwork], inner: AbstractResolver | None = None
                 ) -> None:
        self._allow = tuple(allow)
        self._inner = inner or DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        for info in found:
            problem = address_problem(ipaddress.ip_address(info["host"]), self._allow)
            if problem:
                raise BlockedAddress(f"{host.rstrip('.')}: {problem}")
        return found

    async def close(self) -> None:
        await self._inner.close()


def session(allow: Sequence[IPNetwork], *, timeout_s: float, concurrency: int,
            per_host: int) -> aiohttp.ClientSession:
    """The client session of the delivery worker (one per process)."""
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(allow), limit=concurrency,
                                     limit_per_host=per_host)
    return aiohttp.ClientSession(connector=connector, trust_env=False,
                                 timeout=aiohttp.ClientTimeout(total=timeout_s),
                                 headers={"User-Agent": "argus-webhooks/1"})


async def registration_problem(url: str, allow: Sequence[IPNetwork]) -> str | None:
    """Why ``url`` may not be registered: its form, or an address it resolves to now
    (checked again at every delivery)."""
    problem = target_problem(url, allow)
    if problem:
        return problem
    parts = urlsplit(url)
    host = wire_host(parts.hostname or "")
    try:
        infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(
            host, parts.port or (443 if parts.scheme == "https" else 80),
            type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
    except TimeoutError:
        return f"host {host} did not resolve within {RESOLVE_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"host {host} does not resolve ({exc.strerror or exc})"
    except ValueError as exc:  # the resolver's own encoding (UnicodeError): no 500
        return f"host {host} cannot be looked up ({exc})"
    for info in infos:
        problem = address_problem(ipaddress.ip_address(info[4][0]), allow)
        if problem:
            return f"host {host}: {problem}"
    return None


def retry_after_s(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds (delta or HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return min(max(0.0, when - now), MAX_RETRY_AFTER_S)


async def send(client: aiohttp.ClientSession, url: str, headers: dict[str, str],
               body: bytes, *, allow: Sequence[IPNetwork], now: float) -> TryResult:
    """One POST to ``url``'s wire form; every failure becomes a ``TryResult`` (nothing
    raises but cancellation)."""
    problem = target_problem(url, allow)
    if problem:
        return TryResult(None, f"refused: {problem}", blocked=True)
    try:
        async with client.post(wire_url(url), data=body, headers=headers,
                               allow_redirects=False) as resp:
            await resp.content.read(MAX_RESPONSE_BYTES)
            status = resp.status
            after = retry_after_s(resp.headers.get("Retry-After"), now)
    except TimeoutError:
        timeout = client.timeout.total
        return TryResult(None, f"no answer within {timeout:g} s")
    except aiohttp.ClientConnectorError as exc:
        if isinstance(exc.os_error, BlockedAddress):
            return TryResult(None, f"refused: {exc.os_error}", blocked=True)
        return TryResult(None, f"cannot connect: {exc.os_error.strerror or exc.os_error}")
    except ValueError as exc:  # a URL the client cannot send (InvalidURL, IDNA): for good
        return TryResult(None, f"refused: the URL cannot be sent ({type(exc).__name__}: "
                               f"{exc})"[:300], blocked=True)
    except (aiohttp.ClientError, OSError) as exc:
        return TryResult(None, f"{type(exc).__name__}: {exc}"[:300])
    return TryResult(status, None, after)  # the policy words a status
