"""``dflashops watch``: a live view of a server from its ``/metrics``, one window per refresh.

On a terminal: a table of the latest windows, redrawn in place. In a pipe: one line per window,
flushed as it comes. ``--json``: one JSON object per window, and nothing else on stdout. Ctrl-C
(or a reader that goes away, ``| head``) ends it with exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import AppContext
from dflashops.cli.options import FiniteFloatRange, playbook_option, skip_pve_check_option

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from dflashops.watch.session import Watch
    from dflashops.watch.window import WatchWindow

pass_app = click.make_pass_decorator(AppContext)
# bench.entry.URL_API_KEY_ENV, spelled out: importing it here would load pydantic on --help
URL_API_KEY_ENV = "DFLASHOPS_API_KEY"
TABLE_ROWS = 15  # windows the live table keeps: half a minute at the default interval


@click.command(
    "watch", short_help="Live view of a server: tok/s, running batch, acceptance per position."
)
@click.argument("name", required=False)
@click.option("--url", help="Server root, e.g. http://127.0.0.1:8000 (instead of NAME).")
@playbook_option
@click.option(
    "--interval",
    type=FiniteFloatRange(min=0.1, max=3600.0),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    metavar="N",
    help="Stop after N windows (default: until Ctrl-C).",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0.1, max=600.0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="The longest one scrape may take; a slower server is reported, then tried again.",
)
@click.option(
    "--server-log",
    metavar="PATH",
    help="NAME: the server log inside the container (default /var/log/dflashops/server.log).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per window on stdout.")
@skip_pve_check_option
@pass_app
def watch(  # Click passes every option by keyword
    app: AppContext,
    *,
    name: str | None,
    url: str | None,
    playbook_name: str | None,
    interval: float,
    count: int | None,
    timeout: float,
    server_log: str | None,
    as_json: bool,
) -> None:
    """Watch a running server live: every --interval seconds its /metrics is scraped and the
    window since the last scrape shown: output tok/s, the running and waiting requests, and
    the spec-decode acceptance length, per-position acceptance and drafts of that window ("—"
    when nothing was drafted). SGLang has no spec-decode counters: for a container NAME its
    server log's Decode batch lines give the acceptance length. NAME's endpoint and API key
    variable come from its /etc/dflashops/deployed.json (else its playbook), as for bench;
    --url watches any server (its key from $DFLASHOPS_API_KEY). A scrape that fails is a
    window that says so, and watching goes on. Ctrl-C ends it (exit 0)."""
    if (name is None) == (url is None):
        raise click.UsageError("give a container NAME or --url URL (one of them)")
    if url is not None and not url.startswith(("http://", "https://")):
        raise click.UsageError(f"--url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
    if url is not None and (playbook_name or server_log) is not None:
        raise click.UsageError("-p and --server-log describe a container NAME; --url needs neither")
    from dflashops.watch.loop import WatchSettings
    from dflashops.watch.session import WatchRequest, open_watch

    request = WatchRequest(
        container=name,
        url=url,
        playbook=playbook_name,
        server_log=server_log,
        settings=WatchSettings(interval_s=interval, count=count, timeout_s=timeout),
    )
    with interrupts_end_it(), open_watch(request, app.inventory) as running:
        for note in running.notes:
            click.echo(f"note: {note}", err=True)
        show = json_lines if as_json else human_view
        show(running, interval)


@contextmanager
def interrupts_end_it() -> Iterator[None]:
    """Ctrl-C and a closed stdout end the block quietly (exit 0, no traceback); a second
    Ctrl-C while connections close is ignored, so that the first one's cleanup finishes."""

    def first_interrupt(_signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    in_main = threading.current_thread() is threading.main_thread()  # signals go there only
    previous = signal.signal(signal.SIGINT, first_interrupt) if in_main else None
    try:
        yield
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # the reader went away (`| head`): later writes, the interpreter's last flush
        # included, go nowhere instead of raising again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def json_lines(running: Watch, _interval: float) -> None:
    for window in running.windows:
        line = json.dumps(window.model_dump(mode="json"), allow_nan=False)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def human_view(running: Watch, interval: float) -> None:
    from dflashops.cli.console import make_console

    console = make_console()
    if not console.is_terminal:
        click.echo(f"watch {_what(running, interval)}", err=True)
        for window in running.windows:
            _print_line(console, window)
        return
    from rich.live import Live

    shown: deque[WatchWindow] = deque(maxlen=TABLE_ROWS)
    title = f"{_what(running, interval)}; Ctrl-C ends"
    with Live(_table(shown, title), console=console, auto_refresh=False) as live:
        for window in running.windows:
            shown.append(window)
            live.update(_table(shown, title), refresh=True)


def _what(running: Watch, interval: float) -> str:
    log = f", log {running.log_path}" if running.log_path else ""
    return f"{running.server} every {interval:g} s{log}"


def _print_line(console: Console, window: WatchWindow) -> None:
    from dflashops.watch.text import window_line

    # the console's stream (its ASCII writer where the locale wants one), not console.print:
    # rich exits 1 by itself when the reader went away, and that ends a watch with 0
    console.file.write(window_line(window) + "\n")
    console.file.flush()


def _table(windows: deque[WatchWindow], title: str) -> Table:
    from rich.table import Table

    from dflashops.watch.text import HEADERS, window_cells

    table = Table(title=title, title_justify="left")
    for header in HEADERS:
        text = header in ("time", "per position", "note")
        table.add_column(header, justify="left" if text else "right", no_wrap=True)
    table.columns[-1].no_wrap = False
    for window in windows:
        table.add_row(*window_cells(window).row(), style="red" if window.error else None)
    return table
