"""The one core call of ``tune-offline``: measurements in, the recommendation out, no server."""

from __future__ import annotations

from dflashops.roofline.request import roofline_spec
from dflashops.tune.acceptance import acceptance_curve
from dflashops.tune.model import TuneInputs, TuneResult, analyse
from dflashops.tune.request import OfflineTuneRequest
from dflashops.tune.runs import TuneRun
from dflashops.tune.source import load_runs


def recommend_offline(request: OfflineTuneRequest) -> TuneResult:
    """The runs of the ``--from`` files and the command line, the given acceptance (which
    replaces the one merged from the runs) and the roofline, analysed.

    Raises ``TuneInputError`` naming the input at fault (its ``field``)."""
    runs: list[TuneRun] = [run for source in request.sources for run in load_runs(source)]
    runs.extend(request.runs)
    curve = None
    if request.acceptance is not None:
        curve = acceptance_curve(
            request.acceptance,
            conditional=request.conditional,
            draft_fraction=request.draft_fraction,
            drafted_per_draft=request.drafted_per_draft,
            extrapolation=request.settings.extrapolation,
        )
    spec = roofline_spec(request.roofline) if request.roofline.names_hardware else None
    return analyse(
        TuneInputs(runs=tuple(runs), acceptance=curve, settings=request.settings, roofline=spec)
    )
