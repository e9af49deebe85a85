"""The bundled server entry: preflight an engine launch, then exec the engine.

Installed in each engine venv (``dflashops[server]``) and run as
``python -m dflashops.server --spec /etc/dflashops/server.json``. Standard library only (torch
and the drafter validator are used when present).
"""
