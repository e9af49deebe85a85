"""A transient rich spinner for long waits, fed by the core's ``progress(message)`` callbacks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def spinner(description: str, *, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """Yield ``say(message)``, which replaces the spinner's text; silent when not ``enabled``."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from dflashops.cli.console import make_console

    console = make_console(stderr=True)
    # rich's default spinner is braille; "line" spins with ASCII characters
    frames = "line" if console.options.ascii_only else "dots"
    with Progress(
        SpinnerColumn(frames),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not enabled,
    ) as progress:
        task = progress.add_task(description)

        def say(message: str) -> None:
            progress.update(task, description=message)

        yield say
