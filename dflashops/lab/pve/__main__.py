"""``python -m dflashops.lab.pve``: run the PVE double in the foreground until SIGTERM/SIGINT.

Prints one JSON line with the URL, CA file and credentials files once it serves, so a parent
process (``lab up``) can read where it is.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from dflashops.lab.pve.double import PveDouble
from dflashops.lab.pve.state import DoubleSettings


def _read_secret(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dflashops.lab.pve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8006)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--etc-pve", type=Path, help="config folder (default STATE/etc-pve)")
    parser.add_argument("--password-file", type=Path, required=True, help="root@pam's password")
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="USER@REALM!NAME=SECRET_FILE",
        help="an API token whose secret is read from SECRET_FILE (repeatable)",
    )
    parser.add_argument("--node", action="append", default=[], help="node name (default: lab)")
    parser.add_argument("--tls-host", action="append", default=[], help="extra certificate name")
    parser.add_argument("--task-delay", type=float, default=0.05)
    parser.add_argument("--create-delay", type=float, default=0.5)
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    tokens = {}
    for spec in args.token:
        authid, _, secret_file = spec.partition("=")
        tokens[authid] = _read_secret(Path(secret_file))
    settings = DoubleSettings(
        state_dir=args.state_dir,
        users={"root@pam": _read_secret(args.password_file)},
        tokens=tokens,
        etc_pve=args.etc_pve,
        nodes=tuple(args.node) or ("lab",),
        tls_hosts=("127.0.0.1", "localhost", *args.tls_host),
        task_delay=args.task_delay,
        create_delay=args.create_delay,
    )
    double = PveDouble(settings, host=args.host, port=args.port)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with double:
        ready = {
            "url": double.api_url,
            "ca": str(double.ca_path),
            "etc_pve": str(double.etc_pve),
            "nodes": list(settings.nodes),
        }
        print(json.dumps(ready), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
