"""Drafter training (``drafter train``), built stage by stage on the deployment contract.

- ``dataset``: the prompts a run trains on (JSONL of prompts, chat messages or conversations),
  read strictly: a bad line is a one-line error naming ``file:line``.
- ``regenerate``: the data stage, the target's own answers to those prompts from its running
  server, written as the conversations the ``speculators`` library's data preparation reads;
  resumable, with bounded concurrency.

Not yet here (issue 18): the training stage through ``speculators``, export, evaluation and the
``drafter train`` command that runs them.
"""
