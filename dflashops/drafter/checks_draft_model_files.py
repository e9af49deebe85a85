"""What a draft model's tokenizer files say, beyond :mod:`dflashops.drafter.files`' token facts:
the id -> token map itself, how text is split, and the chat template.

Read from the model folder (``DrafterFiles.path`` / ``TargetFiles.path``); a model given without
a folder has none of these (the comparisons then say so). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.drafter.files import TOKENIZER_CONFIG, TOKENIZER_JSON, read_json_object
from dflashops.errors import DrafterError, read_capped

# slow-tokenizer files and the sentencepiece model: compared byte for byte
RAW_FILES = ("vocab.json", "merges.txt", "tokenizer.model", "tiktoken.model")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
MAX_RAW_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TokenizerFiles:
    """The content that decides which token an id is, and how text becomes ids.

    ``vocab``: token -> id from ``tokenizer.json``'s ``model.vocab`` (Unigram pieces are keyed by
    position); ``splitting``: a digest of everything else that turns text into ids (merges,
    pre-tokenizer, normalizer, model type); ``raw``: sha256 of each slow-tokenizer file present;
    ``chat_template``: the default template, if any."""

    vocab: Mapping[str, int] | None = None
    splitting: str | None = None
    raw: Mapping[str, str] = field(default_factory=dict)
    chat_template: str | None = None


def read_tokenizer_files(folder: str | None) -> TokenizerFiles:
    if folder is None:
        return TokenizerFiles()
    directory = Path(folder)
    vocab: Mapping[str, int] | None = None
    splitting: str | None = None
    json_path = directory / TOKENIZER_JSON
    if json_path.is_file():
        data = read_json_object(json_path, "tokenizer")
        vocab, splitting = _model_vocab(data.get("model")), _splitting_digest(data)
    raw = {name: _sha256(directory / name) for name in RAW_FILES if (directory / name).is_file()}
    return TokenizerFiles(vocab, splitting, raw, _chat_template(directory))


def _model_vocab(model: Any) -> Mapping[str, int] | None:
    vocab = model.get("vocab") if isinstance(model, Mapping) else None
    if isinstance(vocab, Mapping):
        return {str(k): v for k, v in vocab.items() if isinstance(v, int)}
    if isinstance(vocab, list):  # Unigram: [piece, score]; the id is the position
        return {
            str(item[0]): i
            for i, item in enumerate(vocab)
            if isinstance(item, list) and item and isinstance(item[0], str)
        }
    return None


def _splitting_digest(data: Mapping[str, Any]) -> str:
    model = data.get("model")
    parts = {
        "model": {k: v for k, v in model.items() if k != "vocab"}
        if isinstance(model, Mapping)
        else model,
        "normalizer": data.get("normalizer"),
        "pre_tokenizer": data.get("pre_tokenizer"),
    }
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(_read(path)).hexdigest()


def _read(path: Path) -> bytes:
    try:
        return read_capped(path, MAX_RAW_BYTES)
    except OSError as exc:
        raise DrafterError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _chat_template(directory: Path) -> str | None:
    """The default template: ``chat_template.jinja``, ``chat_template.json``, then the one in
    ``tokenizer_config.json`` (a string, or a list of named templates), as transformers looks."""
    jinja = directory / CHAT_TEMPLATE_FILES[0]
    if jinja.is_file():
        return _read(jinja).decode("utf-8", errors="replace")
    for name in (CHAT_TEMPLATE_FILES[1], TOKENIZER_CONFIG):
        path = directory / name
        if path.is_file():
            found = _template_value(read_json_object(path, name).get("chat_template"))
            if found is not None:
                return found
    return None


def _template_value(raw: Any) -> str | None:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        named = {t.get("name"): t.get("template") for t in raw if isinstance(t, Mapping)}
        chosen = named.get("default", next(iter(named.values()), None))
        return chosen if isinstance(chosen, str) else None
    return None
