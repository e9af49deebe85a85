"""The launch templates: where they are, and a Jinja2 environment that cannot emit unquoted text.

``templates/`` is a top-level folder of the repository; the wheel ships it as
``dflashops/templates`` (pyproject ``force-include``). :func:`templates_dir` finds either.

Every ``{{ … }}`` must pass through a quoting filter: ``q`` (POSIX shell, :func:`shlex.quote`),
``envname`` (a variable name, checked), ``unit`` (a systemd value from a safe alphabet,
checked) or ``comment`` (inside a ``#`` comment: joined onto one line, since a newline would
end the comment and run the rest). The environment's ``finalize`` hook refuses any other value,
so a template that forgets to quote fails to render instead of producing a script that runs
what a value says.
Undefined names fail too (``StrictUndefined``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from dflashops.errors import TemplateRenderError

TEMPLATES_ENV = "DFLASHOPS_TEMPLATES"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what a systemd unit value may contain without escaping rules of its own
_UNIT_SAFE = re.compile(r"^[A-Za-z0-9_./@:+-]+$")


def templates_dir(package_dir: Path | None = None) -> Path:
    """``<package>/templates`` (installed wheel), else ``<package>/../templates`` (checkout)."""
    package = package_dir or Path(__file__).resolve().parent.parent
    for candidate in (package / "templates", package.parent / "templates"):
        if (candidate / "launch.sh.j2").is_file():
            return candidate
    raise TemplateRenderError(
        f"launch templates not found next to {package}",
        hint="reinstall dflashops (the wheel ships dflashops/templates)",
    )


class Quoted(str):
    """Text that a filter made safe for where the template puts it."""

    __slots__ = ()


def _scalar(value: Any, what: str) -> str:
    import jinja2

    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError, naming the missing value
    if isinstance(value, bool) or value is None:
        raise TemplateRenderError(f"{what}: refusing to render {value!r} (not text or a number)")
    if isinstance(value, str | int | float | Path):
        return str(value)
    raise TemplateRenderError(f"{what}: refusing to render a {type(value).__name__}")


def shell_quote(value: Any) -> Quoted:
    """One shell word, whatever ``value`` contains (quotes, ``$()``, newlines)."""
    return Quoted(shlex.quote(_scalar(value, "q")))


def env_name(value: Any) -> Quoted:
    text = _scalar(value, "envname")
    if not _ENV_NAME.match(text):
        raise TemplateRenderError(f"{text!r} is not a valid environment variable name")
    return Quoted(text)


def unit_value(value: Any) -> Quoted:
    text = _scalar(value, "unit")
    if not _UNIT_SAFE.match(text):
        raise TemplateRenderError(
            f"{text!r} cannot go into a systemd unit (allowed: letters, digits, _ . / @ : + -)"
        )
    return Quoted(text)


def comment_text(value: Any) -> Quoted:
    """Text for a ``#`` comment: on one line, so it cannot end the comment and run."""
    return Quoted(" ".join(_scalar(value, "comment").split()))


def _require_quoted(value: Any) -> Any:
    if isinstance(value, Quoted):
        return value
    raise TemplateRenderError(
        f"template interpolates {str(value)[:60]!r} without a quoting filter "
        "(q, envname, unit, comment)"
    )


def environment(directory: Path | None = None) -> Any:
    """The Jinja2 environment for ``directory`` (default: :func:`templates_dir`)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_require_quoted,
    )
    env.filters.update(q=shell_quote, envname=env_name, unit=unit_value, comment=comment_text)
    return env


def render_template(name: str, context: dict[str, Any], directory: Path | None = None) -> str:
    """Render one template; a missing value or an unquoted one is a TemplateRenderError."""
    import jinja2

    try:
        text: str = environment(directory).get_template(name).render(**context)
    except jinja2.UndefinedError as exc:
        raise TemplateRenderError(f"template {name}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise TemplateRenderError(f"template {name}: {exc}") from None
    return text
