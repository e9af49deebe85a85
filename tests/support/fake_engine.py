"""A fake vLLM for launch tests over real SSH: a stdlib HTTP server posing as
``vllm.entrypoints.cli.main`` in a base venv made in a lab container.

It answers ``/health`` after ``FAKE_HEALTH_AFTER`` s and completions after ``FAKE_PROBE_AFTER``
s (so readiness and rollback are tested in seconds) and, with ``FAKE_PROBE_GATE=PATH``, only
while that file exists (a test opens the gate when it wants, whatever the machine's load), fails
on purpose with
``FAKE_FAIL=port``, records what it was asked in ``FAKE_RECORD``, and with ``FAKE_CHILD=1``
starts a child that stays in its process group after it dies, as vLLM's ``EngineCore`` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dflashops.remote import FileUpload, SshConnection, put_files

FAKE_VENV = "/srv/fakevenv"
FAKE_RECORD = "/srv/fake-record.log"

FAKE_ENGINE = r'''
"""A fake vLLM: /health after FAKE_HEALTH_AFTER s, completions after FAKE_PROBE_AFTER s."""
import json, os, socketserver, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Server(ThreadingHTTPServer):
    def server_bind(self):
        # HTTPServer looks up its FQDN here; the container has no DNS, which costs seconds
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "fake", self.server_address[1]

def flag(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default

def main():
    args = sys.argv[1:]
    started = time.time()
    port, host = int(flag(args, "--port")), flag(args, "--host", "0.0.0.0")
    name = flag(args, "--served-model-name")
    health_after = float(os.environ.get("FAKE_HEALTH_AFTER", "0"))
    probe_after = float(os.environ.get("FAKE_PROBE_AFTER", "0"))
    gate = os.environ.get("FAKE_PROBE_GATE")
    record = os.environ.get("FAKE_RECORD")
    print(f"fake engine: starting {name} on {port}", flush=True)
    if os.environ.get("FAKE_FAIL") == "port":
        time.sleep(1)
        print("OSError: [Errno 98] Address already in use", flush=True)
        sys.exit(1)

    def note(what):
        if record:
            with open(record, "a") as out:
                out.write(json.dumps({"t": time.time(), "what": what}) + "\n")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            age = time.time() - started
            if self.path == "/health":
                code = 200 if age >= health_after else 503
                note(f"health {code}")
                self.send(code, {})
            elif self.path == "/v1/models":
                self.send(200, {"data": [{"id": name}]})
            else:
                self.send(404, {})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            opened = not gate or os.path.exists(gate)
            code = 200 if opened and time.time() - started >= probe_after else 503
            note(f"completion {code}")
            self.send(code, {"choices": [{"text": "x"}]} if code == 200 else {"error": "warming"})

    if os.environ.get("FAKE_CHILD"):
        # an engine core's stand-in: a child in the server's process group that outlives it
        # when the server is killed (re-parented, as vLLM's EngineCore is)
        import subprocess
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(86400)  # fake vllm EngineCore"]
        )
    print("fake engine: serving", flush=True)
    Server((host, port), Handler).serve_forever()

if __name__ == "__main__":
    main()
'''


def install_fake_engine(conn: SshConnection, base_python: str) -> None:
    """A base venv at :data:`FAKE_VENV` whose ``vllm`` is the fake engine, and a fake model."""
    site = f"{FAKE_VENV}/lib/python3.11/site-packages"
    conn.run(f"{base_python} -m venv {FAKE_VENV}", deadline=180)
    files = {
        f"{site}/vllm/__init__.py": "",
        f"{site}/vllm/entrypoints/__init__.py": "",
        f"{site}/vllm/entrypoints/cli/__init__.py": "",
        f"{site}/vllm/entrypoints/cli/main.py": FAKE_ENGINE,
        f"{site}/vllm-0.32.0.dist-info/METADATA": (
            "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n"
        ),
        f"{site}/vllm-0.32.0.dist-info/RECORD": "",
        "/srv/fake-model/config.json": json.dumps({"model_type": "qwen3"}),
        "/srv/fake-model/model.safetensors": "\0" * 8,
    }
    put_files(conn, [FileUpload(p, text.encode()) for p, text in files.items()])


def fake_playbook(path: Path, container: str, **env: str) -> Path:
    """A playbook serving the fake engine in ``container`` (``env``: the server's, e.g.
    ``FAKE_PROBE_AFTER``), written to ``path``."""
    book: dict[str, Any] = {
        "version": 1,
        "name": "fake-slow",
        "container": container,
        "model": {"path": "/srv/fake-model", "served_name": "fake"},
        "engine": {"name": "vllm", "version": "0.32.0", "base_venv": FAKE_VENV},
        "server": {
            "device": "cpu",
            "port": 30000,
            "env": {
                "FAKE_HEALTH_AFTER": "4",
                "FAKE_PROBE_AFTER": "8",
                "FAKE_RECORD": FAKE_RECORD,
                **env,
            },
        },
    }
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path
