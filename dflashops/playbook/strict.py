"""Every playbook model's base: an unknown key is refused (a typo is an error, not a default)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # allow_inf_nan: ``timeout_s: .inf`` is a typo or an attack, never a setting
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
