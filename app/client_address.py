"""The network address of the client a page serves (the class round's join limit counts joins per address).

Streamlit knows the websocket's peer (``st.context.ip_address``; ``None`` for a client on this machine). Behind a
reverse proxy (deploy/haproxy.cfg) the peer is the proxy, and the client's address is in the ``X-Forwarded-For``
header the proxy adds (HAProxy: ``option forwardfor``). Any client can send that header too, so it is believed
only when ``PANDA_TRUSTED_PROXY`` says the server is reachable through a trusted proxy alone, and then only its
last entry, the one the proxy appended (whatever the client wrote comes before it).
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any

__all__ = ["TRUSTED_PROXY_ENV", "behind_trusted_proxy", "client_address", "address_group"]

#: "1" (or true, yes, on): every request comes through a proxy that appends the client to X-Forwarded-For.
TRUSTED_PROXY_ENV = "PANDA_TRUSTED_PROXY"
_YES = ("1", "true", "yes", "on")
#: The prefix one IPv6 client (a phone, a home router) is given: it may take any address in it.
IPV6_CLIENT_PREFIX = 64


def behind_trusted_proxy() -> bool:
    """Whether the setting says the server sits behind a proxy that forwards the client's address."""
    return os.environ.get(TRUSTED_PROXY_ENV, "").strip().lower() in _YES


def _parse(value: object) -> str | None:
    """``value`` as a canonical IP address (a port or IPv6 brackets dropped), or None if it is not one."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.startswith("[") and "]" in text:  # [2001:db8::1]:4711
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # 192.0.2.1:4711
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _forwarded(headers: Any) -> str | None:
    """The last address of the last X-Forwarded-For line (the one the trusted proxy wrote)."""
    if headers is None:
        return None
    get_all = getattr(headers, "get_all", None)
    lines = get_all("X-Forwarded-For") if callable(get_all) else [headers.get("X-Forwarded-For")]
    lines = [line for line in lines or [] if isinstance(line, str) and line.strip()]
    if not lines:
        return None
    return _parse(lines[-1].split(",")[-1])


def client_address(context: Any = None) -> str | None:
    """The client's IP address, or None when it is not known (a client on this machine, no session).

    ``context``: Streamlit's ``st.context`` (the default) or anything with ``ip_address`` and ``headers``.
    """
    try:
        if context is None:
            import streamlit as st

            context = st.context
        peer = _parse(getattr(context, "ip_address", None))
        if behind_trusted_proxy():
            return _forwarded(getattr(context, "headers", None)) or peer
        return peer
    except Exception:  # noqa: BLE001 (no session, a header Streamlit cannot read: the address is unknown)
        return None


def address_group(address: str) -> str:
    """What one client controls of ``address``: an IPv4 address itself, an IPv6 address's /64 network."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return str(address)[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(ip)
