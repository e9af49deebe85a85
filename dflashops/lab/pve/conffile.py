"""PVE container config files (``/etc/pve/lxc/<vmid>.conf``): parse and write like pve-container.

Layout (``PVE::LXC::Config::parse_pct_config`` / ``write_pct_config``): ``#`` comment lines at the
top of a section are the URL-encoded description; ``key: value`` lines; raw ``lxc.*`` lines
(``key: value`` or ``key = value``) kept in file order as the read-only ``lxc`` list; a
``[pve:pending]`` section and one ``[snapname]`` section per snapshot. The digest is the SHA-1 of
the whole file, so any edit (also a raw line appended over SSH) changes it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from dflashops.lab.pve.validate import parse_boolean

# lxc.* keys PVE keeps (is_valid_lxc_conf_key); others are dropped with a warning
VALID_LXC_KEYS = frozenset(
    [
        "lxc.apparmor.profile",
        "lxc.apparmor.allow_incomplete",
        "lxc.apparmor.allow_nesting",
        "lxc.apparmor.raw",
        "lxc.selinux.context",
        "lxc.include",
        "lxc.arch",
        "lxc.uts.name",
        "lxc.signal.halt",
        "lxc.signal.reboot",
        "lxc.signal.stop",
        "lxc.init.cmd",
        "lxc.init.cwd",
        "lxc.pty.max",
        "lxc.console.logfile",
        "lxc.console.path",
        "lxc.tty.max",
        "lxc.devtty.dir",
        "lxc.hook.autodev",
        "lxc.autodev",
        "lxc.kmsg",
        "lxc.mount.fstab",
        "lxc.mount.entry",
        "lxc.mount.auto",
        "lxc.rootfs.mount",
        "lxc.cap.drop",
        "lxc.cap.keep",
        "lxc.seccomp.profile",
        "lxc.seccomp.notify.proxy",
        "lxc.seccomp.notify.cookie",
        "lxc.idmap",
        "lxc.hook.pre-start",
        "lxc.hook.pre-mount",
        "lxc.hook.mount",
        "lxc.hook.start",
        "lxc.hook.stop",
        "lxc.hook.post-stop",
        "lxc.hook.clone",
        "lxc.hook.destroy",
        "lxc.hook.version",
        "lxc.log.level",
        "lxc.log.file",
        "lxc.start.auto",
        "lxc.start.delay",
        "lxc.start.order",
        "lxc.group",
        "lxc.environment",
        "lxc.environment.runtime",
        "lxc.environment.hooks",
        "lxc.sysctl.fs.mqueue",
        "lxc.sysctl.kernel.msgmax",
        "lxc.sysctl.kernel.msgmnb",
        "lxc.sysctl.kernel.msgmni",
        "lxc.sysctl.kernel.sem",
        "lxc.sysctl.kernel.shmall",
        "lxc.sysctl.kernel.shmmax",
        "lxc.sysctl.kernel.shmmni",
        "lxc.sysctl.kernel.shm_rmid_forced",
    ]
)
_LXC_KEY_PREFIXES = ("lxc.cgroup.", "lxc.cgroup2.", "lxc.prlimit.", "lxc.net.", "lxc.limit.")
_LXC_LINE = re.compile(r"(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*")
_KEY_LINE = re.compile(r"([a-z][a-z_]*\d*):\s*(.+?)\s*")
_SECTION = re.compile(r"\[([a-z][a-z0-9_\-]+)\]\s*", re.IGNORECASE)
_PENDING = re.compile(r"\[pve:pending\]\s*", re.IGNORECASE)


@dataclass
class Section:
    """One section of the file: plain keys (string values as written) and raw lxc lines."""

    values: dict[str, str] = field(default_factory=dict)
    lxc: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ContainerConfig:
    main: Section = field(default_factory=Section)
    pending: Section = field(default_factory=Section)
    snapshots: dict[str, Section] = field(default_factory=dict)
    digest: str = ""
    warnings: list[str] = field(default_factory=list)


def digest_of(raw: bytes) -> str:
    return hashlib.sha1(raw).hexdigest()


def decode_text(text: str) -> str:
    return unquote(text)


def encode_text(text: str) -> str:
    """``PVE::Tools::encode_text``: escape ':' and everything outside printable ASCII."""
    return "".join(
        char
        if 0x20 <= ord(char) <= 0x39 or 0x3B <= ord(char) <= 0x7E
        else "".join(f"%{byte:02X}" for byte in char.encode())
        for char in text
    )


def _lxc_key_valid(key: str) -> bool:
    return key in VALID_LXC_KEYS or key.startswith(_LXC_KEY_PREFIXES)


def parse(raw: bytes, vmid: int, booleans: frozenset[str] = frozenset()) -> ContainerConfig:
    """Parse a config file; ``booleans`` names keys whose values normalise to ``1``/``0``."""
    conf = ContainerConfig(digest=digest_of(raw))
    section, section_name, description = conf.main, "", ""

    def close_description() -> None:
        if description:
            section.values["description"] = description

    for line in raw.decode("utf-8", errors="replace").split("\n"):
        if not line.strip():
            continue
        if _PENDING.fullmatch(line) or _SECTION.fullmatch(line):
            close_description()
            description = ""
            match = _SECTION.fullmatch(line)
            section_name = match.group(1) if match else "pve:pending"
            section = Section()
            if match:
                conf.snapshots[section_name] = section
            else:
                conf.pending = section
            continue
        if line.startswith("#"):
            description += decode_text(line[1:]) + "\n"
            continue
        lxc = _LXC_LINE.fullmatch(line)
        if lxc:
            if _lxc_key_valid(lxc.group(1)):
                section.lxc.append((lxc.group(1), lxc.group(3)))
            else:
                conf.warnings.append(f"vm {vmid} - unable to parse config: {line}")
            continue
        if line.startswith("description:"):
            description += decode_text(line.partition(":")[2].strip())
            continue
        item = _KEY_LINE.fullmatch(line)
        if item is None:
            conf.warnings.append(f"vm {vmid} - unable to parse config: {line}")
            continue
        key, value = item.group(1), item.group(2)
        if key == "delete" and section_name != "pve:pending":
            conf.warnings.append(f"vm {vmid} - property 'delete' is only allowed in [pve:pending]")
            continue
        if key in booleans and parse_boolean(value) is not None:
            value = str(parse_boolean(value))
        section.values[key] = value
    close_description()
    return conf


def _render_section(section: Section) -> str:
    described = section.values.get("description", "").split("\n")
    while described and not described[-1]:
        described.pop()  # like Perl's split, which drops trailing empty fields
    lines = [f"#{encode_text(line)}" for line in described]
    for key in sorted(section.values):
        if key == "description":
            continue
        value = section.values[key]
        if "\n" in value:
            raise ValueError(f"detected invalid newline inside property '{key}'")
        lines.append(f"{key}: {value}")
    lines += [f"{key}: {value}" for key, value in section.lxc]
    return "".join(f"{line}\n" for line in lines)


def render(conf: ContainerConfig) -> bytes:
    """The file text PVE would write for ``conf`` (sorted keys, lxc lines last, sections after)."""
    text = _render_section(conf.main)
    if conf.pending.values or conf.pending.lxc:
        text += "\n[pve:pending]\n" + _render_section(conf.pending)
    for name in sorted(conf.snapshots):
        text += f"\n[{name}]\n" + _render_section(conf.snapshots[name])
    return text.encode()
