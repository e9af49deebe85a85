"""``/nodes/{node}/lxc/{vmid}/firewall/...``: a container's firewall options and rules.

As on PVE the container's firewall lives in ``<etc_pve>/firewall/<vmid>.fw``: an ``[OPTIONS]``
section of ``key: value`` lines and a ``[RULES]`` section of one line per rule
(``IN ACCEPT -source 10.0.0.2 -p tcp -dport 29501 # comment``; a disabled rule starts with
``|``). ``POST .../rules`` puts a new rule first (position 0) unless ``pos`` says where, as
``PVE::API2::Firewall::RulesBase`` does; every change checks the optional ``digest``. The double
records rules and never filters traffic: what it checks is what PVE's API checks.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.lab.pve.ctcommon import CT, load
from dflashops.lab.pve.errors import fail, param_error
from dflashops.lab.pve.routing import Request, route

FW = CT + "/firewall"
RULE_KEYS = ("type", "action", "proto", "source", "dest", "dport", "sport", "iface", "log")
# the rule options a .fw line writes as "-flag value", in PVE's order
FLAGS = {"iface": "-i", "source": "-source", "dest": "-dest", "proto": "-p", "dport": "-dport",
         "sport": "-sport", "log": "-log"}  # fmt: skip
_LOCK = threading.Lock()


@dataclass
class FirewallFile:
    options: dict[str, str] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)

    def render(self) -> bytes:
        lines = ["[OPTIONS]", ""]
        lines += [f"{key}: {value}" for key, value in sorted(self.options.items())]
        lines += ["", "[RULES]", ""]
        for rule in self.rules:
            parts = [
                "" if rule.get("enable", 1) else "|",
                str(rule["type"]).upper(),
                rule["action"],
            ]
            text = (parts[0] + " ".join(parts[1:])).strip()
            for key, flag in FLAGS.items():
                if rule.get(key) not in (None, ""):
                    text += f" {flag} {rule[key]}"
            if rule.get("comment"):
                text += f" # {rule['comment']}"
            lines.append(text)
        return ("\n".join(lines) + "\n").encode()


def parse(raw: bytes) -> FirewallFile:
    result = FirewallFile()
    section = ""
    by_flag = {flag: key for key, flag in FLAGS.items()}
    for raw_line in raw.decode().splitlines():
        line = raw_line.strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[]").upper()
            continue
        if section == "OPTIONS":
            key, _, value = line.partition(":")
            result.options[key.strip()] = value.strip()
        elif section == "RULES":
            body, _, comment = line.partition(" # ")
            enable = 0 if body.startswith("|") else 1
            words = body.lstrip("|").split()
            rule: dict[str, Any] = {"type": words[0].lower(), "action": words[1], "enable": enable}
            for flag, value in zip(words[2::2], words[3::2], strict=False):
                rule[by_flag.get(flag, flag.lstrip("-"))] = value
            if comment:
                rule["comment"] = comment
            result.rules.append(rule)
    return result


def _path(req: Request) -> Path:
    return req.state.configs.etc_pve / "firewall" / f"{req.vmid}.fw"


def _read(req: Request) -> tuple[FirewallFile, str]:
    load(req)  # the container must exist on this node, as on PVE
    path = _path(req)
    raw = path.read_bytes() if path.exists() else b""
    return parse(raw), hashlib.sha1(raw).hexdigest()


def _write(req: Request, fw: FirewallFile, digest: str) -> None:
    wanted = req.params.get("digest")
    if wanted and wanted != digest:
        raise fail("detected modified configuration - file changed by other user? Try again.")
    path = _path(req)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fw.render())


def _with_pos(rules: list[dict[str, Any]], digest: str) -> list[dict[str, Any]]:
    return [{**rule, "pos": pos, "digest": digest} for pos, rule in enumerate(rules)]


@route("GET", FW)
def firewall_index(req: Request) -> list[dict[str, str]]:
    load(req)
    return [{"name": name} for name in ("rules", "aliases", "ipset", "options", "log", "refs")]


@route("GET", FW + "/options")
def get_options(req: Request) -> dict[str, Any]:
    fw, digest = _read(req)
    typed: dict[str, Any] = {
        key: int(value) if value.isdigit() else value for key, value in fw.options.items()
    }
    return {**typed, "digest": digest}


@route("PUT", FW + "/options")
def set_options(req: Request) -> None:
    with _LOCK:
        fw, digest = _read(req)
        params = {k: v for k, v in req.params.items() if k not in ("node", "vmid", "digest")}
        for key in str(params.pop("delete", "") or "").replace(";", ",").split(","):
            if key.strip():
                fw.options.pop(key.strip(), None)
        for key, value in params.items():
            fw.options[key] = str(int(value)) if isinstance(value, bool) else str(value)
        _write(req, fw, digest)


@route("GET", FW + "/rules")
def list_rules(req: Request) -> list[dict[str, Any]]:
    fw, digest = _read(req)
    return _with_pos(fw.rules, digest)


@route("GET", FW + "/rules/{pos}")
def get_rule(req: Request) -> dict[str, Any]:
    fw, digest = _read(req)
    pos = int(req.params["pos"])
    if pos >= len(fw.rules):
        raise fail("no rule at position " + str(pos))
    return _with_pos(fw.rules, digest)[pos]


@route("POST", FW + "/rules")
def create_rule(req: Request) -> None:
    params = req.params
    if str(params.get("type", "")).lower() not in ("in", "out", "group", "forward"):
        raise param_error({"type": f"value '{params.get('type')}' does not have a value in the "
                                   "enumeration 'in, out, forward, group'"})  # fmt: skip
    rule: dict[str, Any] = {
        key: str(params[key]) for key in RULE_KEYS if params.get(key) not in (None, "")
    }
    rule["type"] = rule["type"].lower()
    rule["enable"] = int(params.get("enable", 0) or 0)
    if params.get("comment"):
        rule["comment"] = str(params["comment"])
    with _LOCK:
        fw, digest = _read(req)
        pos = params.get("pos")
        at = min(int(pos), len(fw.rules)) if pos is not None else 0
        fw.rules.insert(at, rule)
        _write(req, fw, digest)


@route("DELETE", FW + "/rules/{pos}")
def delete_rule(req: Request) -> None:
    with _LOCK:
        fw, digest = _read(req)
        pos = int(req.params["pos"])
        if pos < len(fw.rules):
            del fw.rules[pos]
        _write(req, fw, digest)
