"""Which Host headers `workbench app` lets open its WebSocket (Streamlit's ``server.allowedHosts``).

The WebSocket carries all of the app's data; a page on another domain whose name an attacker re-points at
this machine (DNS rebinding) is same-origin to the browser, so only the Host check stops it. The rule:

- loopback names (localhost, 127.0.0.1, ::1) and a concrete ``--host`` address are always allowed;
- serving on every interface (``--host 0.0.0.0`` or ``::``) needs at least one ``--allowed-host`` NAME, the
  name browsers will use: without one no remote browser could connect, and the user most likely meant
  to switch the check off (which is ``--allow-any-host``, said out loud, with a warning);
- an ``--allowed-host`` is one exact host name or address: Streamlit reads ``*`` and ``*.example`` as
  patterns that let any (rebinding) domain in, so they are refused.
"""

from __future__ import annotations

import re

from core.errors import WorkbenchError

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
ANY_INTERFACE = ("0.0.0.0", "::", "")
# a DNS name or an IPv4/IPv6 address: letters, digits, dots, hyphens and colons; no pattern characters
HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.\-:]*[A-Za-z0-9.])?$")

ANY_HOST_WARNING = ("warning: --allow-any-host: the app's WebSocket accepts any Host header, so a web page on "
                    "any domain re-pointed at this machine (DNS rebinding) can read and drive the app; "
                    "use --allowed-host NAME instead unless a proxy in front checks the Host")


def allowed_hosts(host: str, allowed: list[str] | None, allow_any: bool = False) -> list[str]:
    """Streamlit's server.allowedHosts for ``--host`` / ``--allowed-host`` / ``--allow-any-host``; a
    WorkbenchError (one line) when the combination would switch the Host check off silently."""
    names: list[str] = []
    for raw in allowed or []:
        name = raw.strip()
        if any(c in name for c in "*?[]"):
            raise WorkbenchError(f"--allowed-host {raw!r} is a pattern: name each host exactly (a wildcard lets "
                                 "any domain re-pointed at this machine in); --allow-any-host switches the "
                                 "check off on purpose")
        if not HOST_NAME.match(name):
            raise WorkbenchError(f"--allowed-host {raw!r} is not a host name")
        names.append(name)
    if allow_any:
        if names:
            raise WorkbenchError("--allow-any-host and --allowed-host contradict each other: give one")
        return ["*"]
    if host.strip() in ANY_INTERFACE and not names:
        raise WorkbenchError(f"--host {host!r} serves on every interface: name the host browsers will use with "
                             "--allowed-host NAME (against DNS rebinding), or pass --allow-any-host to switch "
                             "the check off")
    hosts = list(LOOPBACK_HOSTS)
    if host.strip() not in ANY_INTERFACE and host not in hosts:
        hosts.append(host)
    return hosts + [n for n in names if n not in hosts]
