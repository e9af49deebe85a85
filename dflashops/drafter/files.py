"""What ``drafter check`` reads from disk: configs, tokenizer facts and safetensors headers.

Standard library only (the bundled server preflight runs these readers inside an engine venv).
Every problem with a file itself (missing, unreadable, not JSON, not an object) is a one-line
:class:`~dflashops.errors.DrafterError`; problems with the *values* inside are findings, reported
by :mod:`dflashops.drafter.validate`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dflashops.drafter.formats import Format, checked_view, config_format
from dflashops.drafter.keys import MISSING, is_int, type_name
from dflashops.drafter.safetensors import WeightsInfo, read_weights
from dflashops.errors import DrafterError, read_capped

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_JSON = "tokenizer.json"
MAX_JSON_BYTES = 512 * 1024 * 1024  # tokenizer.json of a 250k vocabulary is ~20 MB

TokenKind = Literal["special", "added", "ordinary", "unused", "unknown"]


@dataclass(frozen=True)
class AddedToken:
    content: str
    special: bool


@dataclass(frozen=True)
class TokenizerInfo:
    """Which ids are special, added or ordinary text, from the tokenizer files of one model.

    ``tokenizer.json`` names every ordinary id (``model.vocab``). With only
    ``tokenizer_config.json``, ids below the first added token are taken as ordinary text: HF
    tokenizers append added tokens after the base vocabulary.
    """

    added: Mapping[int, AddedToken]
    ordinary_ids: frozenset[int] | None = None
    sources: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """One past the highest id the tokenizer can produce."""
        return max(itertools.chain(self.added, self.ordinary_ids or ()), default=-1) + 1

    def classify(self, token_id: int) -> TokenKind:
        """special / added (not special) / ordinary text / unused (past every token) / unknown."""
        token = self.added.get(token_id)
        if token is not None:
            return "special" if token.special else "added"
        if token_id >= self.size:
            return "unused"
        if self.ordinary_ids is not None:
            return "ordinary" if token_id in self.ordinary_ids else "unknown"
        first_added = min(self.added, default=None)
        if first_added is not None and 0 <= token_id < first_added:
            return "ordinary"
        return "unknown"


@dataclass(frozen=True)
class DrafterFiles:
    """A drafter checkpoint as read from disk (or built in memory by a caller)."""

    name: str
    config: Mapping[str, Any]
    path: str | None = None
    weights: WeightsInfo | None = None
    tokenizer: TokenizerInfo | None = None

    @property
    def format(self) -> Format:
        """The layout of ``config``: z-lab's or the speculators library's."""
        return config_format(self.config)

    @property
    def checked_config(self) -> dict[str, Any]:
        """``config`` in the z-lab layout, as the engine reads it (the checks read this)."""
        return checked_view(self.config)


@dataclass(frozen=True)
class TargetFiles:
    """The target model: its config (fields may sit under ``text_config``) and tokenizer."""

    name: str
    config: Mapping[str, Any]
    path: str | None = None
    tokenizer: TokenizerInfo | None = None

    def text_value(self, key: str) -> Any:
        """``text_config[key]`` for multimodal targets, else the top-level ``key``, else MISSING."""
        text = self.config.get("text_config")
        if isinstance(text, Mapping) and key in text:
            return text[key]
        return self.config.get(key, MISSING)

    def where(self, key: str) -> str:
        text = self.config.get("text_config")
        return f"text_config.{key}" if isinstance(text, Mapping) and key in text else key


def expand_user(text: str) -> Path:
    """``~`` and ``~user`` expanded; left as written when that user has no home (``Path``
    raises RuntimeError), so the error is the usual "no such file"."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a name no file can have (too long: ENAMETOOLONG)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def split_location(spec: str) -> tuple[str | None, Path]:
    """``NAME:PATH`` or a plain path. An existing path wins, so paths with colons still work."""
    path = expand_user(spec)
    if _exists(path) or ":" not in spec:
        return None, path
    name, _, rest = spec.partition(":")
    if not name or not rest:
        return None, path
    return name, expand_user(rest)


def _resolve(spec: str, what: str) -> tuple[str, Path, Path]:
    """(display name, directory, config file) for a ``DIR``, ``CONFIG.json`` or ``NAME:PATH``."""
    if not spec.strip():
        raise DrafterError(f"{what} {spec!r}: an empty path")
    name, path = split_location(spec)
    if not _exists(path):
        raise DrafterError(f"{what} {path}: no such file or directory")
    if path.is_dir():
        directory, config = path, path / CONFIG_FILE
        if not config.is_file():
            raise DrafterError(f"{what} {path}: has no {CONFIG_FILE}")
    else:
        directory, config = path.parent, path
    return name or directory.resolve().name, directory, config


def read_json_object(path: Path, what: str = "file") -> dict[str, Any]:
    """A JSON object from ``path``, or a one-line ``DrafterError`` saying why not."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise DrafterError(f"{path}: {size} bytes is too large for a {what}")
        raw = read_capped(path, MAX_JSON_BYTES)
    except OSError as exc:
        raise DrafterError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise DrafterError(
            f"{path}: {what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        detail = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise DrafterError(f"{path}: {what} is not valid JSON: {detail}") from exc
    if not isinstance(data, dict):
        raise DrafterError(f"{path}: {what} is {type_name(data)}, not a JSON object")
    return data


def read_tokenizer(directory: Path) -> TokenizerInfo | None:
    """Token facts from ``tokenizer_config.json`` and ``tokenizer.json`` (``None`` if neither)."""
    added: dict[int, AddedToken] = {}
    ordinary: frozenset[int] | None = None
    special_contents: set[str] = set()
    sources: list[str] = []
    config_path = directory / TOKENIZER_CONFIG
    if config_path.is_file():
        data = read_json_object(config_path, "tokenizer config")
        added.update(_added_tokens_decoder(config_path, data.get("added_tokens_decoder", {})))
        special_contents |= _named_special_tokens(data)
        sources.append(config_path.name)
    json_path = directory / TOKENIZER_JSON
    if json_path.is_file():
        data = read_json_object(json_path, "tokenizer")
        for token_id, token in _added_tokens_list(json_path, data.get("added_tokens", [])).items():
            known = added.get(token_id)
            # either file marking a token special is enough: engines honour both
            added[token_id] = AddedToken(
                token.content, token.special or (known is not None and known.special)
            )
        ordinary = _model_vocab_ids(json_path, data.get("model"))
        sources.append(json_path.name)
    if not sources:
        return None
    if special_contents:
        added = {
            i: AddedToken(t.content, t.special or t.content in special_contents)
            for i, t in added.items()
        }
    if ordinary is not None:
        ordinary = ordinary - added.keys()
    return TokenizerInfo(added=added, ordinary_ids=ordinary, sources=tuple(sources))


def _added_tokens_decoder(path: Path, raw: Any) -> dict[int, AddedToken]:
    if not isinstance(raw, dict):
        raise DrafterError(f"{path}: added_tokens_decoder is {type_name(raw)}, not an object")
    out: dict[int, AddedToken] = {}
    for key, entry in raw.items():
        if not (isinstance(key, str) and key.isdigit()) or not isinstance(entry, dict):
            raise DrafterError(f"{path}: added_tokens_decoder[{key[:40]!r}] is malformed")
        out[int(key)] = _added_token(path, entry, f"added_tokens_decoder[{key}]")
    return out


def _added_tokens_list(path: Path, raw: Any) -> dict[int, AddedToken]:
    if not isinstance(raw, list):
        raise DrafterError(f"{path}: added_tokens is {type_name(raw)}, not a list")
    out: dict[int, AddedToken] = {}
    for n, entry in enumerate(raw):
        token_id = entry.get("id") if isinstance(entry, dict) else None
        if not is_int(token_id) or token_id < 0:
            raise DrafterError(f"{path}: added_tokens[{n}] has no integer id")
        out[token_id] = _added_token(path, entry, f"added_tokens[{n}]")
    return out


def _added_token(path: Path, entry: dict[str, Any], where: str) -> AddedToken:
    content, special = entry.get("content"), entry.get("special", False)
    if not isinstance(content, str) or not isinstance(special, bool):
        raise DrafterError(f"{path}: {where} needs a string content and a boolean special")
    return AddedToken(content, special)


def _named_special_tokens(data: Mapping[str, Any]) -> set[str]:
    """Contents named as special outside ``added_tokens_decoder`` (``mask_token``, …)."""
    names: set[str] = set()
    candidates: list[Any] = [data.get(k) for k in data if k.endswith("_token")]
    extra = data.get("additional_special_tokens")
    if isinstance(extra, list):
        candidates.extend(extra)
    for item in candidates:
        if isinstance(item, str):
            names.add(item)
        elif isinstance(item, dict) and isinstance(item.get("content"), str):
            names.add(item["content"])
    return names


def _model_vocab_ids(path: Path, model: Any) -> frozenset[int] | None:
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if vocab is None:
        return None
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        if not all(is_int(v) for v in vocab.values()):
            raise DrafterError(f"{path}: model.vocab has non-integer ids")
        return frozenset(vocab.values())
    if isinstance(vocab, list):  # Unigram: [piece, score] pairs, the id is the position
        return frozenset(range(len(vocab)))
    raise DrafterError(f"{path}: model.vocab is {type_name(vocab)}")


def read_drafter(spec: str) -> DrafterFiles:
    """A drafter from ``DIR``, ``DIR/config.json`` or ``NAME:PATH``."""
    name, directory, config = _resolve(spec, "drafter")
    return DrafterFiles(
        name=name,
        path=str(directory),
        config=read_json_object(config, "drafter config"),
        weights=read_weights(directory),
        tokenizer=read_tokenizer(directory),
    )


def read_target(spec: str) -> TargetFiles:
    """A target from ``DIR``, ``DIR/config.json`` or ``NAME:PATH`` (its weights are not read)."""
    name, directory, config = _resolve(spec, "target")
    return TargetFiles(
        name=name,
        path=str(directory),
        config=read_json_object(config, "target config"),
        tokenizer=read_tokenizer(directory),
    )
