"""``dflashops up``: the whole loop per (playbook, container) pair, resumable, pairs in parallel.

Steps, in order (the names ``--from`` takes): provision → drafter → launch → smoke → bench →
tune → report; each calls the core function the single command calls. A run record per pair
(:mod:`dflashops.up.record`) says what succeeded with which inputs; :mod:`dflashops.up.plan`
decides, from it, what a run does and why (a launch whose server no longer serves,
:mod:`dflashops.up.serving`, runs again); :mod:`dflashops.up.runner` runs the pairs, each under
its lock (:mod:`dflashops.up.lock`: one ``up`` per pair at a time).
"""
