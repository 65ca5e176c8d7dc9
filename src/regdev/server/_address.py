"""Where ``regdev serve --http`` listens: ``[HOST:]PORT``, and whether a host is this
machine only. Standard library only, so the command line checks ``--http`` before it imports
the MCP SDK."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "parse_address"]


def parse_address(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` -> (host, port); the host is ``127.0.0.1`` when left out, an IPv6
    address is written in brackets (``[::1]:8000``), port 0 picks a free one.

    Raises:
        ValueError: not of that form, or the port is outside 0..65535 (the message repeats the
            expected form).
    """
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host or "127.0.0.1"
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535 or not host or (
            ":" in host and not (bracketed and _is_ip(host))):
        raise ValueError(f"--http takes [HOST:]PORT (127.0.0.1:8000, [::1]:8000, 8000), "
                         f"got {text!r}")
    return host, int(port_text)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
