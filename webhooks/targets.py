"""Where a webhook may be sent: the URL rules and the address policy (SSRF, issue 21).

- The URL is `https` (or `http` when the operator sets `AGENTRUN_WEBHOOK_ALLOW_HTTP`), has
  a host, no user info and no fragment.
- Every address the host resolves to must be globally routable: loopback, private,
  link-local (169.254.169.254 is the cloud metadata service), carrier-grade NAT,
  multicast, reserved and unspecified ranges are refused, IPv4-mapped IPv6 included,
  unless `AGENTRUN_WEBHOOK_ALLOW_PRIVATE=true`.
- The check runs at registration and again at every send, and the sender connects to the
  very address that passed (`resolve_target`), so a DNS answer that changes between the
  check and the connection (rebinding) cannot redirect a delivery.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from agentrun import conf

_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: not global, not "private"


class TargetRefused(Exception):
    """The URL or one of its addresses is not an allowed webhook target."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line
    address: str  # the checked IP the connection goes to


def check_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an allowed URL, else `TargetRefused`."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise TargetRefused(f"not a valid URL: {error}") from error
    allowed = {"https", "http"} if conf.webhook_allow_http() else {"https"}
    if parts.scheme not in allowed:
        raise TargetRefused(f"the scheme must be {' or '.join(sorted(allowed))}")
    if not parts.hostname:
        raise TargetRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the URL must not carry credentials")
    if parts.fragment:
        raise TargetRefused("the URL must not have a fragment")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


def refusal_of(address: str) -> str | None:
    """Why an IP address is not an allowed target, or None."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if conf.webhook_allow_private():
        return None
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (the metadata service lives there)"
    if ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED):
        return "a private address"
    if not ip.is_global or ip.is_multicast:
        return "not a globally routable address"
    return None


def resolve_target(url: str) -> Target:
    """Check the URL, resolve its host now and check every address; the target to connect
    to (the first address). Raises `TargetRefused`."""
    scheme, host, port, path = check_url(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise TargetRefused(f"the host {host!r} does not resolve: {error}") from error
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        reason = refusal_of(address)
        if reason is not None:
            # The address is not echoed: a tenant must not map internal names through this.
            raise TargetRefused(f"{host} resolves to {reason}")
    if not addresses:
        raise TargetRefused(f"the host {host!r} has no address")
    return Target(scheme, host, port, path, addresses[0])
