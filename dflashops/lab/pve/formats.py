"""PVE's named string formats (``format: "pve-vmid"`` and friends), with PVE's messages.

Rules follow ``PVE::JSONSchema`` (pve-common), ``PVE::LXC::Config`` (pve-container) and
``PVE::Storage``: which characters a name may hold, what an address or a size looks like. Suffixes
work as in PVE: ``<fmt>-list`` / ``<fmt>-alist`` check every item of a ``split_list`` (``,``/``;``
/whitespace, or NUL), ``<fmt>-opt`` also accepts the empty string. Formats the double does not
know are accepted and recorded in :data:`UNCHECKED_FORMATS` (none of them is used by the lxc,
storage or task endpoints).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

Checker = Callable[[str], None]

UNCHECKED_FORMATS: set[str] = set()


class FormatError(Exception):
    """A value does not fit its format. ``errors`` holds per-key messages of property strings."""

    def __init__(self, message: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or {}

    def __str__(self) -> str:
        # PVE::Exception stringifies as the message followed by one "key: message" line per error
        text = self.message if self.message.endswith("\n") else self.message + "\n"
        return text + "".join(f"{key}: {msg}\n" for key, msg in self.errors.items())


def split_list(text: str) -> list[str]:
    """``PVE::Tools::split_list``: NUL-separated, else split on ``,`` ``;`` and whitespace."""
    if "\0" in text:
        return text.split("\0")
    return re.sub(r"[,;]", " ", text).split()


def _regex_format(pattern: str, message: str, flags: int = 0) -> Checker:
    compiled = re.compile(pattern, flags | re.ASCII)

    def check(value: str) -> None:
        if not compiled.fullmatch(value):
            raise FormatError(message.format(value=value))

    return check


def _ip(value: str, version: int | None) -> bool:
    if "%" in value:  # Python accepts IPv6 scope ids, PVE's IPV6RE does not
        return False
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return version is None or address.version == version


def _cidr(value: str, version: int) -> bool:
    address, slash, prefix = value.partition("/")
    if not slash or not prefix.isdigit() or not _ip(address, version):
        return False
    top = 32 if version == 4 else 128
    return 7 < int(prefix) <= top


def _predicate_format(test: Callable[[str], bool], message: str) -> Checker:
    def check(value: str) -> None:
        if not test(value):
            raise FormatError(message.format(value=value))

    return check


_DNS_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"
_DNS_NAME = re.compile(rf"({_DNS_LABEL}\.)*{_DNS_LABEL}", re.ASCII)
_IFACE = re.compile(r"[a-z][a-z0-9_]{1,20}([:.]\d+)?", re.ASCII | re.IGNORECASE)
_STORAGE_ID = r"[a-z][a-z0-9\-_.]*[a-z0-9]"
_VOLUME_ID = re.compile(rf"({_STORAGE_ID}):(.+)", re.ASCII | re.IGNORECASE | re.DOTALL)
DISK_SIZE = re.compile(r"(\d+(\.\d+)?)([KMGT])?", re.ASCII)
STORAGE_CONTENT_TYPES = ("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import")


def parse_volume_id(volid: str) -> tuple[str, str] | None:
    """``PVE::Storage::parse_volume_id``: (storage, volname), or None."""
    match = _VOLUME_ID.fullmatch(volid)
    return (match.group(1), match.group(2)) if match else None


def parse_size(text: str) -> int | None:
    """``PVE::JSONSchema::parse_size``: bytes, or None when unparsable."""
    match = DISK_SIZE.fullmatch(text)
    if not match:
        return None
    factor = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[match.group(3) or ""]
    return int(float(match.group(1)) * factor)


def format_size(size: int) -> str:
    """``PVE::JSONSchema::format_size``: the largest unit that divides the size exactly."""
    for unit, factor in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % factor == 0 and size >= factor:
            return f"{size // factor}{unit}"
    return str(size)


def _startup_order(value: str) -> bool:
    for part in value.split(","):
        if part.strip() and not re.fullmatch(r"(order=)?\d+|up=\d+|down=\d+", part, re.ASCII):
            return False
    return bool(value)


def _mp_string(value: str) -> None:
    if re.search(r"/\.\.?/", value) or re.search(r"/\.\.?$", value) or value.startswith("../"):
        raise FormatError(f"{value} contains illegal character sequences")


def _dev_string(value: str) -> None:
    if re.search(r"/\.\.?(?:/|$)", value) or not value.startswith("/dev/"):
        raise FormatError(f"{value} is not a valid device path")


def _timezone(value: str) -> None:
    if value == "host":
        return
    import zoneinfo

    if value not in zoneinfo.available_timezones():
        raise FormatError(f"invalid time zone '{value}'")


def _ip_with_ll_iface(value: str) -> bool:
    address, percent, iface = value.partition("%")
    if percent and address.lower().startswith("fe80:"):
        return _ip(address, 6) and bool(_IFACE.fullmatch(iface))
    return _ip(value, None)


def _pool_id(value: str) -> bool:
    parts = value.split("/")
    return len(parts) <= 3 and all(
        re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_\-]+", part, re.ASCII) for part in parts
    )


FORMATS: dict[str, Checker] = {
    "string": lambda value: None,
    "pve-node": _regex_format(
        r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?", "value does not look like a valid node name"
    ),
    "pve-vmid": _regex_format(r"[1-9][0-9]{2,8}", "value does not look like a valid VM ID"),
    "pve-storage-id": _regex_format(
        _STORAGE_ID, "storage ID '{value}' contains illegal characters", re.IGNORECASE
    ),
    "pve-configid": _regex_format(
        r"[a-z][a-z0-9_]+", "invalid configuration ID '{value}'", re.IGNORECASE
    ),
    "pve-tag": _regex_format(
        r"[a-z0-9_][a-z0-9_\-+.]*", "invalid characters in tag", re.IGNORECASE
    ),
    "pve-iface": _predicate_format(
        lambda v: bool(_IFACE.fullmatch(v)), "invalid network interface name '{value}'"
    ),
    "pve-bridge-id": _regex_format(r"[-_.\w\d]+", "invalid bridge ID '{value}'"),
    "pve-realm": _regex_format(
        r"[A-Za-z][A-Za-z.\-_0-9]*[A-Za-z0-9]", "realm name '{value}' contains invalid characters"
    ),
    "pve-poolid": _predicate_format(_pool_id, "invalid pool ID '{value}'"),
    "pve-task-status-type": _regex_format(
        r"ok|error|warning|unknown", "invalid status type '{value}'"
    ),
    "pve-storage-content": _predicate_format(
        lambda v: v in STORAGE_CONTENT_TYPES, "invalid content type '{value}'"
    ),
    "urlencoded": _regex_format(r"[-%a-zA-Z0-9_.!~*'()]*", "invalid urlencoded string: {value}"),
    "dns-name": _predicate_format(
        lambda v: bool(_DNS_NAME.fullmatch(v)), "value does not look like a valid DNS name"
    ),
    "ipv4": _predicate_format(lambda v: _ip(v, 4), "value does not look like a valid IPv4 address"),
    "ipv6": _predicate_format(lambda v: _ip(v, 6), "value does not look like a valid IPv6 address"),
    "ip": _predicate_format(lambda v: _ip(v, None), "value does not look like a valid IP address"),
    "address": _predicate_format(
        lambda v: _ip(v, None) or bool(_DNS_NAME.fullmatch(v)),
        "value does not look like a valid address: {value}",
    ),
    "CIDRv4": _predicate_format(
        lambda v: _cidr(v, 4), "value does not look like a valid IPv4 CIDR network"
    ),
    "CIDRv6": _predicate_format(
        lambda v: _cidr(v, 6), "value does not look like a valid IPv6 CIDR network"
    ),
    "CIDR": _predicate_format(
        lambda v: _cidr(v, 4) or _cidr(v, 6), "value does not look like a valid CIDR network"
    ),
    "IPorCIDR": _predicate_format(
        lambda v: _ip(v, None) or _cidr(v, 4) or _cidr(v, 6),
        "value does not look like a valid IP address or CIDR network",
    ),
    "pve-ipv4-config": _predicate_format(
        lambda v: v in ("dhcp", "manual") or _cidr(v, 4),
        "value does not look like a valid ipv4 network configuration",
    ),
    "pve-ipv6-config": _predicate_format(
        lambda v: v in ("auto", "dhcp", "manual") or _cidr(v, 6),
        "value does not look like a valid ipv6 network configuration",
    ),
    "lxc-ip-with-ll-iface": _predicate_format(
        _ip_with_ll_iface, "value does not look like a valid IP address"
    ),
    "mac-addr": _regex_format(
        r"[a-f0-9][02468ace](?::[a-f0-9]{2}){5}",
        "value does not look like a valid unicast MAC address",
        re.IGNORECASE,
    ),
    "disk-size": _predicate_format(
        lambda v: parse_size(v) is not None, "value does not look like a valid disk size: {value}"
    ),
    "pve-startup-order": _predicate_format(_startup_order, "unable to parse startup options"),
    "pve-volume-id": _predicate_format(
        lambda v: parse_volume_id(v) is not None, "unable to parse volume ID '{value}'"
    ),
    "pve-lxc-mp-string": _mp_string,
    "pve-lxc-dev-string": _dev_string,
    "pve-ct-timezone": _timezone,
}


def check_named_format(name: str, value: str) -> None:
    """Check ``value`` against the named format ``name``; raise :class:`FormatError`."""
    list_match = re.fullmatch(r"(.*)-a?list", name)
    if list_match and list_match.group(1) in FORMATS:
        for item in split_list(value):  # PVE allows empty lists
            FORMATS[list_match.group(1)](item)
        return
    opt_match = re.fullmatch(r"(.*)-opt", name)
    if opt_match and opt_match.group(1) in FORMATS:
        if value:
            FORMATS[opt_match.group(1)](value)
        return
    checker = FORMATS.get(name)
    if checker is None:
        UNCHECKED_FORMATS.add(name)
        return
    checker(value)
