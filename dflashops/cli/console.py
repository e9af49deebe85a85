"""The one factory for every rich ``Console`` the CLI makes: human output that survives a pipe.

Width. A terminal gets its own width (rich's detection; ``COLUMNS`` overrides it, as rich
always did). A pipe or a file gets ``COLUMNS`` when set; else a line of text does not wrap at
all (``UNWRAPPED_WIDTH``: ``grep`` finds whole lines, a command stays one line to copy), and a
table is laid out to ``PIPE_TABLE_WIDTH``, as on a terminal: unwrapped, a table with a prose
column (the lab demo's results) draws rows hundreds of characters wide that a pager or a log
viewer folds through its borders. Whatever the width, one print never breaks a word
(an identifier, a dotted key, a URL, a number) and never cuts a table cell: text wraps only at
spaces, and a table that does not fit is laid out column by column no narrower than each
column's longest word (a ``no_wrap`` column: its longest cell). When even that does not fit,
that print is made wider than the width: a line longer than ``COLUMNS`` (or the terminal, which
then wraps it on screen) keeps every character, where rich alone would fold or cut with ``…``.
A table's title stays on one line when the width allows it.

Encoding. Plain ASCII when the stream cannot carry UTF-8 (``PYTHONIOENCODING=ascii``) or the
locale the user set is not UTF-8 (``LANG=C``, ``LC_ALL=POSIX``, ``en_US.ISO-8859-1``): Python
writes UTF-8 in the C locale anyway (PEP 538/540), which such a terminal or log viewer shows as
garbage. Then the console reports an ASCII encoding, so rich draws boxes and bars in ASCII
(``box.ASCII``), and every other character is written as its ASCII fallback (``≈`` as ``~``,
``×`` as ``*``, ``—`` as ``-``), or ``?`` when there is none. No locale variable at all is not
taken as a choice: then the stream's encoding decides.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Mapping
from typing import IO, Any, cast

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.file_proxy import FileProxy
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# Wide enough that no real line wraps, small enough that a renderable which pads to the width
# (none of ours does) stays a nuisance rather than a disaster.
UNWRAPPED_WIDTH = 10_000
# A table's width in a pipe without COLUMNS: a wide terminal's, what a log viewer shows whole.
PIPE_TABLE_WIDTH = 120

# What a character the output uses reads as in ASCII; box drawing is rich's (box.ASCII).
ASCII_FALLBACKS = str.maketrans(
    {
        "≈": "~",
        "—": "-",
        "–": "-",
        "−": "-",
        "×": "*",
        "·": "*",
        "²": "^2",
        "…": "...",
        "→": "->",
        "←": "<-",
        "≥": ">=",
        "≤": "<=",
        "±": "+/-",
        "Σ": "sum",
        "ρ": "rho",
        "α": "alpha",
        "μ": "u",
        "█": "#",
        "━": "-",
        "─": "-",
        "│": "|",
        "•": "*",
    }
)

# The values Python puts into LC_CTYPE when it coerces the C locale (PEP 538): not the user's
# choice, so they do not count as a UTF-8 locale.
_COERCED_CTYPES = frozenset({"C.UTF-8", "C.utf8", "UTF-8"})


def make_console(stderr: bool = False) -> FittingConsole:
    """A console on stdout (or stderr) with the width and encoding this module describes."""
    # None: Python started with that descriptor closed (rich then writes nowhere)
    stream: IO[str] | None = sys.stderr if stderr else sys.stdout
    if isinstance(stream, FileProxy):  # under a live display: the stream it stands for
        stream = stream.rich_proxied_file
    # a StringIO has no encoding (None): it takes any text, as UTF-8 does
    encoding = (stream.encoding if isinstance(stream, io.TextIOBase) else None) or "utf-8"
    ascii_output = ascii_only(encoding, os.environ, c_locale_at_start=bool(sys.flags.utf8_mode))
    is_tty = _isatty(stream)
    console = FittingConsole(
        stderr=stderr,
        # IO[str] is a nominal type that a small writer cannot declare without two dozen
        # methods it does not need; rich only writes, flushes and asks isatty/encoding.
        file=cast(IO[str], AsciiWriter(stream)) if ascii_output and stream is not None else None,
        width=output_width(is_tty, os.environ),
    )
    console.table_width = table_width(is_tty, os.environ)
    return console


def output_width(is_tty: bool, environ: Mapping[str, str]) -> int | None:
    """``None`` (rich: the terminal's width, or COLUMNS) on a TTY; else COLUMNS or unwrapped."""
    if is_tty:
        return None
    return _columns(environ) or UNWRAPPED_WIDTH


def table_width(is_tty: bool, environ: Mapping[str, str]) -> int | None:
    """The width tables are laid out to when it differs from the console's: in a pipe
    without COLUMNS, ``PIPE_TABLE_WIDTH``; else None (the console's width)."""
    return None if is_tty or _columns(environ) else PIPE_TABLE_WIDTH


def _columns(environ: Mapping[str, str]) -> int | None:
    columns = environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def ascii_only(encoding: str, environ: Mapping[str, str], *, c_locale_at_start: bool) -> bool:
    """True when the stream cannot carry UTF-8, or the locale the user set is not UTF-8.

    ``c_locale_at_start`` is Python's UTF-8 mode flag, which it turns on by itself when it
    starts in the C or POSIX locale; then a ``C.UTF-8`` in LC_CTYPE is Python's own coercion.
    """
    if not _names_utf8(encoding):
        return True
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):  # POSIX precedence
        value = environ.get(name, "")
        if name == "LC_CTYPE" and c_locale_at_start and value in _COERCED_CTYPES:
            continue
        if value:
            return not _names_utf8(value.split("@")[0].rpartition(".")[2])
    return False


def to_ascii(text: str) -> str:
    return text.translate(ASCII_FALLBACKS).encode("ascii", "replace").decode("ascii")


def _names_utf8(codeset: str) -> bool:
    return codeset.lower().replace("-", "").replace("_", "") == "utf8"


def _isatty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        return False


class AsciiWriter:
    """Writes to ``stream`` with every character replaced by its ASCII fallback."""

    encoding = "ascii"  # rich reads it: ASCII boxes and bars

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(to_ascii(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return _isatty(self._stream)

    def fileno(self) -> int:
        return self._stream.fileno()


class FittingConsole(Console):
    """A console whose prints never break a word nor cut a table cell (see the module)."""

    # tables are laid out to this width instead of the console's (make_console: in a pipe)
    table_width: int | None = None

    def print(self, *objects: Any, **options: Any) -> None:
        if options.get("soft_wrap") or self.soft_wrap:  # nothing wraps or crops then
            super().print(*objects, **options)
            return
        if len(objects) == 1 and isinstance(objects[0], Group):
            # the same lines, but one long word widens only the part it is in
            for part in objects[0].renderables:
                self.print(part, **options)
            return
        width = layout = self.width
        if self.table_width is not None and any(isinstance(o, Table) for o in objects):
            layout = min(width, self.table_width)
        # Console.print clamps its own width argument to the console's, so the console takes
        # this print's width (the table width, or more when a word needs it) for this one print
        try:
            self.width = layout
            self.width = max([layout, *(self._fit(item, options) for item in objects)])
            super().print(*objects, **options)
        finally:
            self.width = width

    def _fit(self, item: object, options: Mapping[str, Any]) -> int:
        """The narrowest width at which ``item`` keeps every word whole (tables are laid out)."""
        if isinstance(item, Group):
            return max((self._fit(part, options) for part in item.renderables), default=0)
        if isinstance(item, Table):
            return fit_table(self, item)
        if isinstance(item, str):
            item = self.render_str(item, markup=options.get("markup"), emoji=options.get("emoji"))
        if isinstance(item, Text):
            measured = Measurement.get(self, _wide(self), item)
            return measured.maximum if item.no_wrap or options.get("no_wrap") else measured.minimum
        return 0  # anything else lays itself out at the console's width


def _wide(target: Console) -> ConsoleOptions:
    """Options to measure with: how wide a thing would be if the width did not limit it."""
    return target.options.update_width(UNWRAPPED_WIDTH)


def fit_table(target: Console, table: Table) -> int:
    """Fix ``table``'s column widths for ``target`` (in place: a table is built for one print);
    return the width the table then needs.

    Rich shrinks the widest wrapping columns first with no regard to the words in them, and
    cuts ``no_wrap`` columns evenly with ``…`` as a last resort. Here each column keeps at least
    its longest word (a ``no_wrap`` column: its longest cell); columns with room to spare give
    it up widest first, exactly as rich would, down to that floor and no further.
    """
    if table.width is not None or not table.columns:
        return table.width or 0
    wide = _wide(target)
    if table.expand and target.width >= UNWRAPPED_WIDTH:
        table.expand = False  # it would fill the whole unwrapped width
    natural: list[int] = []
    floor: list[int] = []
    for column in table.columns:
        cells: list[RenderableType] = [column.header] if table.show_header else []
        cells += list(column.cells)
        if table.show_footer:
            cells.append(column.footer)
        if not cells:
            return 0  # nothing to measure; rich sizes it
        measured = [Measurement.get(target, wide, cell) for cell in cells]
        widest = max(m.maximum for m in measured)
        if column.width is not None:
            natural.append(column.width)
            floor.append(column.width)
            continue
        longest_word = max(m.minimum for m in measured)
        floor.append(max(widest if column.no_wrap else longest_word, column.min_width or 0))
        natural.append(max(widest, floor[-1]))
    # borders and cell padding: the table's own measure less what its columns hold
    overhead = Measurement.get(target, wide, table).maximum - sum(natural)
    widths = _share(natural, floor, target.width - overhead)
    if widths != natural:
        for column, width in zip(table.columns, widths, strict=True):
            column.width = width
    needed = overhead + sum(widths)
    title = _title_width(target, table, min(target.width, UNWRAPPED_WIDTH))
    if title > needed:
        table.min_width = max(table.min_width or 0, title)
        needed = title
    return needed


def _share(natural: list[int], floor: list[int], available: int) -> list[int]:
    """Column widths within ``available``: the widest give way first, none below its floor."""
    if sum(natural) <= available:
        return natural
    if sum(floor) >= available:
        return floor
    low, high = 0, max(natural)  # the largest cap that fits: sum is monotone in the cap
    while low < high:
        cap = (low + high + 1) // 2
        if sum(max(f, min(n, cap)) for n, f in zip(natural, floor, strict=True)) <= available:
            low = cap
        else:
            high = cap - 1
    return [max(f, min(n, low)) for n, f in zip(natural, floor, strict=True)]


def _title_width(target: Console, table: Table, room: int) -> int:
    """How wide the table must be for its title and caption to keep their words whole, and to
    stay on one line when ``room`` allows."""
    wide = _wide(target)
    width = 0
    for annotation in (table.title, table.caption):
        if annotation:
            measured = Measurement.get(target, wide, annotation)
            width = max(width, measured.minimum, min(measured.maximum, room))
    return width
