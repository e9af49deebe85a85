"""``dflashops up``: the whole loop per (playbook, container) pair, resumable, pairs in parallel.

Steps, in order (the names ``--from`` takes): provision → drafter → launch → smoke → bench →
tune → report; each calls the core function the single command calls. A run record per pair
(:mod:`dflashops.up.record`) says what succeeded with which inputs; :mod:`dflashops.up.plan`
decides, from it, what a run does and why; :mod:`dflashops.up.runner` runs the pairs.
"""
