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

A URL's host is judged, looked up and connected to in one form, its wire form
(``wire_host``): a malformed host is a refusal saying why, never an exception from the
resolver's IDNA encoding, and a host the HTTP client would rewrite (``169。254。169。254``
is the IP literal 169.254.169.254 to yarl) is judged as rewritten.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import idna  # IDNA 2008 with UTS 46 mapping: what yarl (aiohttp's URLs) encodes hosts with

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_LEN = 2048
SCHEMES = ("http", "https")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_ULA = ipaddress.IPv6Network("fc00::/7")
MAX_HOST_LEN, MAX_LABEL_LEN = 253, 63
_DOTS_RE = re.compile("[.\u3002\uff0e\uff61]")  # the dots IDNA reads as "."
_LABEL_RE = re.compile(r"[a-z0-9_-]+")
_NUMERIC_RE = re.compile(r"[0-9]+|0x[0-9a-f]*")  # what inet_aton reads as a number


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


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class BadHost(ValueError):
    """A URL's host that is neither a DNS name nor an IP literal; the message says why."""


def _shown(host: str) -> str:
    return repr(host if len(host) <= 60 else host[:57] + "...")


def _ascii_label(label: str, host: str) -> str:
    """One label of ``host`` in its wire form (lower case ASCII), or BadHost."""
    if not label.isascii():
        try:
            label = idna.encode(label, uts46=True, transitional=False).decode("ascii")
        except UnicodeError as exc:  # idna.IDNAError and the codecs' errors
            raise BadHost(f"host {_shown(host)} is not a valid international name "
                          f"(IDNA: {exc})") from None
    label = label.lower()
    if len(label) > MAX_LABEL_LEN:
        raise BadHost(f"host {_shown(host)} has a label longer than {MAX_LABEL_LEN} "
                      "characters")
    if not _LABEL_RE.fullmatch(label):
        raise BadHost(f"host {_shown(host)}: a label may hold only letters, digits, '-' "
                      "and '_'")
    if label.startswith("xn--"):
        try:
            idna.decode(label)
        except UnicodeError:
            raise BadHost(f"host {_shown(host)} has a label that is not a valid IDNA "
                          f"A-label: {label[:63]!r}") from None
    return label


def wire_host(host: str) -> str:
    """``host`` (a URL's, as ``urlsplit`` gives it) in the one form it is judged, looked
    up and connected to; BadHost saying why it is no host.

    An IP literal in its normal form (one trailing dot dropped); a name in lower case
    ASCII, each label that is not ASCII encoded per IDNA 2008 with the UTS 46 mapping
    (full-width letters read as ASCII; like "." the dots U+3002, U+FF0E and U+FF61 end a
    label), one trailing dot kept. Refused: empty labels (``a..b``, a leading dot),
    labels over 63 characters, names over 253, characters other than letters, digits,
    ``-`` and ``_`` (and ``xn--`` labels that do not decode), and a name whose last label
    is a number unless it is a dotted-decimal IPv4 address (``2130706433``, ``0x7f.1``,
    ``127.1`` and ``0177.0.0.1`` are loopback to ``inet_aton``, not names).
    """
    if not host:
        raise BadHost("has no host")
    if ":" in host:  # only a bracketed IPv6 literal holds a colon
        ip = literal_ip(host)
        if ip is None:
            raise BadHost(f"host {_shown(host)} is not a valid IPv6 address")
        return str(ip)
    labels = _DOTS_RE.split(host)
    trailing = len(labels) > 1 and labels[-1] == ""
    if trailing:
        labels.pop()
    if "" in labels:
        raise BadHost(f"host {_shown(host)} has an empty label (two dots in a row, or a "
                      "dot at its start)")
    name = ".".join(_ascii_label(label, host) for label in labels)
    if len(name) > MAX_HOST_LEN:
        raise BadHost(f"host {_shown(host)} is longer than {MAX_HOST_LEN} characters")
    if _NUMERIC_RE.fullmatch(name.rsplit(".", 1)[-1]):
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            raise BadHost(f"host {_shown(host)} is no name (its last label is a number) "
                          "and no IPv4 address in dotted-decimal form a.b.c.d") from None
    return name + "." if trailing else name


def wire_url(url: str) -> str:
    """``url`` with its host in the wire form (``wire_host``; BadHost or ValueError for
    what ``url_problem`` refuses)."""
    parts = urlsplit(url)
    host = wire_host(parts.hostname or "")
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def url_problem(url: object) -> str | None:
    """What is wrong with a webhook URL before any address is looked at (None: nothing)."""
    if not isinstance(url, str) or not url:
        return "must be an http or https URL"
    if len(url) > MAX_URL_LEN:
        return f"must be at most {MAX_URL_LEN} characters"
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        return "must not contain spaces or control characters"
    if not _is_utf8(url):
        return "must be valid Unicode (a lone surrogate such as \\ud800 is none)"
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
    try:
        wire_host(parts.hostname)
    except BadHost as exc:
        return str(exc)
    return None


def target_problem(url: str, allow: Sequence[IPNetwork] = ()) -> str | None:
    """``url_problem``, then the address rule when the host is an IP literal in its wire
    form (a name is checked once resolved)."""
    problem = url_problem(url)
    if problem:
        return problem
    ip = literal_ip(wire_host(urlsplit(url).hostname or ""))
    return None if ip is None else address_problem(ip, allow)
