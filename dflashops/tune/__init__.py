"""Choosing ``num_speculative_tokens`` (k) from measurements.

- ``acceptance``: per-position acceptance → tokens per verify step, extrapolation.
- ``stepcost``: step time as a function of the draft tokens verified, fitted.
- ``runs``: one measured run (``TuneRun``), merged into a curve and step-time points.
- ``model``: predicted throughput per k, ``choose_k``, ``analyse`` (the offline entry point).
- ``plan``: ``TunePlan``, which k a live driver launches next within a budget.
- ``source``: runs from a file (``--from``); the one place that knows the file layout.
"""

from __future__ import annotations

from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import AcceptanceCurve, Extrapolation, acceptance_curve
from dflashops.tune.model import (
    KPrediction,
    TuneInputs,
    TuneResult,
    TuneSettings,
    analyse,
    choose_k,
    predict,
)
from dflashops.tune.plan import Probe, TunePlan
from dflashops.tune.runs import TuneRun
from dflashops.tune.stepcost import CostPoint, FitMethod, StepCostFit, fit_step_cost

__all__ = [
    "AcceptanceCurve",
    "CostPoint",
    "Extrapolation",
    "FitMethod",
    "KPrediction",
    "Probe",
    "StepCostFit",
    "TuneInputError",
    "TuneInputs",
    "TunePlan",
    "TuneResult",
    "TuneRun",
    "TuneSettings",
    "acceptance_curve",
    "analyse",
    "choose_k",
    "fit_step_cost",
    "predict",
]
