"""The data stage of drafter training: the dataset read strictly, and the target's answers
regenerated turn by turn over real HTTP (a small chat server on loopback), resumably."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dflashops.errors import ConfigError
from dflashops.training.dataset import Sample, Turn, read_samples
from dflashops.training.regenerate import (
    RegenerationError,
    RegenerationSettings,
    finished_ids,
    regenerate,
)


class ChatServer:
    """Answers each chat with the last user turn upper-cased (and its reasoning when thinking);
    fails the first ``transient`` requests with 503, and every request whose last user turn is
    ``refuse`` with 400."""

    def __init__(self, transient: int = 0) -> None:
        self.transient = transient
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    fail = server.transient > 0
                    server.transient -= fail
                last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
                if fail:
                    self._reply(503, {"error": {"message": "warming up"}})
                elif last == "refuse":
                    self._reply(400, {"error": {"message": "prompt too long"}})
                else:
                    message = {"role": "assistant", "content": last.upper()}
                    if body.get("chat_template_kwargs", {}).get("enable_thinking"):
                        message["reasoning_content"] = f"thinking about {last}"
                    self._reply(200, {"choices": [{"index": 0, "message": message}]})

            def _reply(self, status: int, data: dict[str, Any]) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    chat.thread.start()
    yield chat
    chat.httpd.shutdown()
    chat.httpd.server_close()


def write(path: Path, *lines: Any) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def settings(server: ChatServer, **values: Any) -> RegenerationSettings:
    return RegenerationSettings(base_url=server.url, model="tiny", **values)


def test_three_shapes_of_sample(tmp_path: Path) -> None:
    path = write(
        tmp_path / "d.jsonl",
        {"prompt": "hello"},
        "",
        {
            "id": 7,
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        },
        {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "old"}]},
    )
    first, second, third = read_samples(path)
    assert first == Sample("d-1", (Turn("user", "hello"),))
    assert second.id == "7" and [t.role for t in second.turns] == ["system", "user"]
    assert third.turns == (Turn("user", "a"), Turn("assistant", "old")) and third.replies == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"d\.jsonl:2: not JSON"),
        ("[1]", r"d\.jsonl:2: each line must be a JSON object"),
        ('{"prompt": "a", "messages": []}', "exactly one of prompt, messages or conversations"),
        ('{"prompt": ""}', r"d\.jsonl:2:prompt: must be a non-empty string"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', r":2:messages\[0\]\.role: role"),
        ('{"messages": [{"role": "user", "content": 3}]}', r"messages\[0\]\.content: content"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}', "no user turn to answer"),
        ('{"prompt": "b", "id": "d-1"}', r":2:id: id 'd-1' is also on line 1"),
        ('{"prompt": "b", "id": true}', r":2:id: must be a non-empty string or an integer"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = write(tmp_path / "d.jsonl", {"prompt": "a"}, line)
    with pytest.raises(ConfigError, match=message) as caught:
        read_samples(path)
    assert caught.value.cli_exit_code == 2
    assert "\n" not in caught.value.one_line()


def test_an_empty_or_unreadable_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no samples"):
        read_samples(write(tmp_path / "e.jsonl", ""))
    with pytest.raises(ConfigError, match="cannot read"):
        read_samples(tmp_path / "missing.jsonl")
    (tmp_path / "b.jsonl").write_bytes(b'{"prompt": "\xff"}\n')
    with pytest.raises(ConfigError, match=r"b\.jsonl:1: not UTF-8"):
        read_samples(tmp_path / "b.jsonl")


def test_every_assistant_turn_is_the_targets_own(server: ChatServer, tmp_path: Path) -> None:
    data = write(
        tmp_path / "d.jsonl",
        {"id": "one", "prompt": "hi"},
        {
            "id": "two",
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "written by someone else"},
                {"role": "user", "content": "b"},
            ],
        },
    )
    out = tmp_path / "out" / "regenerated.jsonl"
    seen: list[str] = []
    result = regenerate(read_samples(data), out, settings(server, temperature=0.7), say=seen.append)
    assert (result.total, result.already_done, result.regenerated) == (2, 0, 2)
    rows = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows["one"]["conversations"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "HI"},
    ]
    assert [m["content"] for m in rows["two"]["conversations"]] == ["a", "A", "b", "B"]
    # the second reply was asked with the target's own first reply in its history
    second = next(b for b in server.bodies if len(b["messages"]) == 3)
    assert second["messages"][1] == {"role": "assistant", "content": "A"}
    assert {b["temperature"] for b in server.bodies} == {0.7}
    assert "chat_template_kwargs" not in server.bodies[0]
    assert seen[-1] == "data: 2/2 regenerated"


def test_thinking_mode_is_sent_and_its_reasoning_kept(server: ChatServer, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    regenerate([Sample("s", (Turn("user", "q"),))], out, settings(server, thinking=True))
    assert server.bodies[0]["chat_template_kwargs"] == {"enable_thinking": True}
    reply = json.loads(out.read_text())["conversations"][1]
    assert reply == {"role": "assistant", "content": "Q", "reasoning_content": "thinking about q"}


def test_a_rerun_continues_where_it_stopped(server: ChatServer, tmp_path: Path) -> None:
    samples = [Sample(f"s{i}", (Turn("user", f"p{i}"),)) for i in range(5)]
    out = tmp_path / "r.jsonl"
    regenerate(samples[:2], out, settings(server))
    with out.open("a") as handle:
        handle.write('{"id": "s2", "conversa')  # the interrupted run's last line, cut short
    assert finished_ids(out) == {"s0", "s1"}
    assert out.read_text().endswith("}\n")  # the cut line is gone
    server.bodies.clear()
    result = regenerate(samples, out, settings(server))
    assert (result.already_done, result.regenerated) == (2, 3)
    assert len(server.bodies) == 3
    assert sorted(json.loads(x)["id"] for x in out.read_text().splitlines()) == [
        f"s{i}" for i in range(5)
    ]


def test_transient_failures_are_retried(tmp_path: Path) -> None:
    chat = ChatServer(transient=2)
    chat.thread.start()
    try:
        out = tmp_path / "r.jsonl"
        regenerate([Sample("s", (Turn("user", "q"),))], out, settings(chat), backoff_s=0.01)
        assert len(chat.bodies) == 3 and json.loads(out.read_text())["id"] == "s"
    finally:
        chat.httpd.shutdown()
        chat.httpd.server_close()


def test_a_refused_request_stops_the_stage_and_keeps_what_was_done(
    server: ChatServer, tmp_path: Path
) -> None:
    samples = [Sample("ok", (Turn("user", "fine"),)), Sample("bad", (Turn("user", "refuse"),))]
    out = tmp_path / "r.jsonl"
    with pytest.raises(RegenerationError, match="sample bad: HTTP 400 from the target: prompt"):
        regenerate(samples, out, settings(server, concurrency=1))
    assert finished_ids(out) == {"ok"}


def test_an_unreachable_server_names_the_sample_and_the_last_problem(tmp_path: Path) -> None:
    unreachable = RegenerationSettings(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=2)
    with pytest.raises(RegenerationError, match=r"sample s: no answer after 4 attempts \(last: "):
        regenerate(
            [Sample("s", (Turn("user", "q"),))], tmp_path / "r.jsonl", unreachable, backoff_s=0.01
        )


def test_a_foreign_output_file_is_not_appended_to(tmp_path: Path) -> None:
    out = write(tmp_path / "r.jsonl", {"something": "else"})
    with pytest.raises(RegenerationError, match=r"r\.jsonl:1: not a line this stage wrote"):
        finished_ids(out)
