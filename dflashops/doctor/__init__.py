"""``doctor NAME``: why a served drafter is slow or accepts little, from what can be measured.

facts (:mod:`.gather`: the manifest, the running command line, the drafter's files, ``/metrics``
over a window or a short probe, the server log, ``nvidia-smi``) → rules (``rules_*``: each reads
the facts and returns findings, or says why it could not check) → ranked findings
(:mod:`.findings`), each with its evidence and the command that fixes it. The rules never touch
the network: unit tests feed them recorded facts (:func:`.diagnose.diagnose`).
"""
