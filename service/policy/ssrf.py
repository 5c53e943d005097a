"""Which addresses an outgoing request of the service may reach (server-side request
forgery): a pure rule, applied to a URL when a webhook is registered and to every
address a host name resolves to when it is delivered (``webhooks.transport``).

The service runs inside the cluster's network, next to Ray's dashboard, the GCS and
whatever else listens there; a webhook URL chosen by any user must not turn it into a
proxy towards them. Refused unless an admin allows the network in config
(``v2.webhooks.allow_networks``): every address that is not globally routable, i.e.
loopback, private (RFC 1918), CGNAT (100.64.0.0/10), link-local (cloud metadata at
169.254.169.254 included), multicast, unspecified, reserved and documentation ranges,
and in IPv6 the unique-local (fc00::/7), link-local, site-local and multicast ranges.
IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by that address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_LEN = 2048
SCHEMES = ("http", "https")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_ULA = ipaddress.IPv6Network("fc00::/7")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, compatible, NAT64, 6to4), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    packed = int(ip)
    if ip in _NAT64 or (packed >> 32 == 0 and packed > 0xFFFF):  # NAT64, ::a.b.c.d
        return ipaddress.IPv4Address(packed & 0xFFFFFFFF)
    return None


def _category(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address (None: it is)."""
    checks = (
        ("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local), ("multicast", ip.is_multicast),
        ("carrier-grade NAT", isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT),
        ("unique-local", isinstance(ip, ipaddress.IPv6Address) and ip in _ULA),
        ("private", ip.is_private),
        ("site-local", isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local),
        ("reserved", ip.is_reserved),
    )
    for name, hit in checks:
        if hit:
            return name
    return None if ip.is_global else "not globally routable"


def _allowed(ip: IPAddress, allow: Sequence[IPNetwork]) -> bool:
    return any(ip in net for net in allow if net.version == ip.version)


def address_problem(ip: IPAddress, allow: Sequence[IPNetwork] = ()) -> str | None:
    """Why the service may not connect to ``ip`` (None: it may). An IPv6 form that
    embeds an IPv4 address is judged (and allowed) by that address."""
    inner = embedded_ipv4(ip)
    if _allowed(ip, allow) or (inner is not None and _allowed(inner, allow)):
        return None
    category = _category(ip if inner is None else inner)
    if category is None:
        return None
    shown = str(ip) if inner is None else f"{ip} (IPv4 {inner})"
    return f"address {shown} is {category}; an admin may allow it in v2.webhooks.allow_networks"


def literal_ip(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is one (brackets of an IPv6 literal removed)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def url_problem(url: object) -> str | None:
    """What is wrong with a webhook URL before any address is looked at (None: nothing)."""
    if not isinstance(url, str) or not url:
        return "must be an http or https URL"
    if len(url) > MAX_URL_LEN:
        return f"must be at most {MAX_URL_LEN} characters"
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in SCHEMES:
        return f"scheme must be http or https, got {parts.scheme or 'none'!r}"
    if not parts.hostname:
        return "has no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (user:password@); put a token in the path"
    if port == 0:
        return "port 0 is not a port"
    return None


def target_problem(url: str, allow: Sequence[IPNetwork] = ()) -> str | None:
    """``url_problem``, then the address rule when the host is an IP literal (a name is
    checked once resolved)."""
    problem = url_problem(url)
    if problem:
        return problem
    ip = literal_ip(urlsplit(url).hostname or "")
    return None if ip is None else address_problem(ip, allow)
