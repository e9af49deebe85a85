"""The lab's reference drafter entry (the tiny DFlash drafter ``lab models`` trains).

The drafter registry reads this folder through the ``dflashops.drafter_registry`` entry point
(pyproject.toml): a ``drafter.ref`` naming the entry resolves wherever the lab is installed, while
the product's own registry, and the wheel a container gets, never carry it.
"""
