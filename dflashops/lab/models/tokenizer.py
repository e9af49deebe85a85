"""A byte-level BPE tokenizer trained on the shipped corpus, with a ChatML chat template.

Runs inside the vLLM venv (``tokenizers`` and ``transformers`` come with vLLM).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dflashops.lab.models.layout import read_corpus

VOCAB_SIZE = 2048
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# DFlash fills the slots it predicts with this token's embedding (dflash_config.mask_token_id).
MASK = "<|mask|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, MASK)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` trained on the corpus (the same corpus → the same vocab)."""
    # One rayon thread: the merge order must not depend on how work was split.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import (  # type: ignore[import-not-found, unused-ignore]
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )
    from transformers import (  # type: ignore[import-not-found, unused-ignore]
        PreTrainedTokenizerFast,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(read_corpus(), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        additional_special_tokens=[IM_START, MASK],
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.model_max_length = 2048
    return hf_tok


def save_tokenizer(tokenizer: Any, path: Path) -> None:
    tokenizer.save_pretrained(str(path))
