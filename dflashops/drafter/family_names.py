"""The names of the drafter families (what the registry's ``family`` field and the validators
use); :mod:`dflashops.drafter.families` says what each means."""

from __future__ import annotations

from typing import Literal

Family = Literal[
    "dflash", "dflash2", "dspark", "eagle3", "eagle", "mtp", "draft_model", "ngram", "suffix"
]
FAMILIES: tuple[Family, ...] = (
    "dflash",
    "dflash2",
    "dspark",
    "eagle3",
    "eagle",
    "mtp",
    "draft_model",
    "ngram",
    "suffix",
)
