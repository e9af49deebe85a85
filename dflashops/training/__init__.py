"""Drafter training (``drafter train``), built stage by stage on the deployment contract.

The container side (run as ``python -m dflashops.training STAGE --job FILE`` in the engine venv,
and in-process by the lab's model build):

- ``job``: the job file and the run folder both sides share;
- ``dataset``: the prompts a run trains on, read strictly (a bad line is ``file:line``);
- ``regenerate``: the data stage, the target's own answers from its running server;
- ``prepare``: tokens, loss masks and the target's hidden states, as ``speculators`` writes them;
- ``trainer``: the train stage, ``speculators``' own training run (what is adapted for the CPU
  is in its docstring);
- ``export``: the drafter directory the engine loads, checked against the target, with
  provenance;
- ``stages``: one entry point per stage, with markers, logs and resumption.

The operator side (``request``, ``plan``, ``run``, ``evaluate``, ``promote``, ``render``) runs
those stages in a container over SSH, around the server that holds the GPUs.
"""
