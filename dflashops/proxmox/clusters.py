"""The PVE API side of one command: one client per cluster, one listing, vmids handed out once.

Every container of a command shares them, from as many threads as ``--parallel`` runs:

- one :class:`~dflashops.proxmox.client.PveClient` per cluster (one login, one HTTPS session
  whose pool holds a connection per thread). A login that failed fails every later ask at
  once with the same reason: ten containers on a PVE that is down wait out one timeout, not ten;
- one listing (``/cluster/resources``: every container of every node) per cluster, read once
  and shared. A step that must see PVE after something it did (after its create; a plan made
  again) asks for a listing read no earlier than a moment it names, and one request then serves
  every thread waiting for such a listing (:class:`SharedListing`);
- vmids for ``vmid: auto`` creates (:meth:`PveClusters.allocate_vmid`): each candidate is handed
  out once per command, so concurrent creates of one command never race each other for
  PVE's ``nextid``; PVE still checks that it is free (others may create too).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from dflashops.errors import DflashopsError, ProxmoxError
from dflashops.inventory.load import Inventory
from dflashops.proxmox.client import PveClient, is_already_exists
from dflashops.proxmox.identity import Resource, list_resources


@dataclass(frozen=True)
class Reading:
    """One listing and when the request for it was sent."""

    resources: tuple[Resource, ...]
    sent: float


class SharedListing:
    """A listing read once and shared; a fresher one read once for every thread that needs it.

    :meth:`get` returns a listing whose request was sent at ``not_before`` or later. While a
    request is in flight, a caller that it satisfies waits for it; one that it does not waits
    for it to end and then sends the next one (one request, however many callers wait)."""

    def __init__(self, fetch: Callable[[], list[Resource]], clock: Callable[[], float]) -> None:
        self._fetch, self._clock = fetch, clock
        self._latest: Reading | None = None
        self._in_flight: float | None = None  # when the request in flight was sent
        self._cond = threading.Condition()
        self.requests = 0  # how many were sent (tests count them)

    def get(self, not_before: float | None = None) -> list[Resource]:
        with self._cond:
            while True:
                latest = self._latest
                if latest is not None and (not_before is None or latest.sent >= not_before):
                    return list(latest.resources)
                if self._in_flight is None:
                    break
                self._cond.wait()  # the one in flight may do; if not, the next one will
            sent = self._in_flight = self._clock()
            self.requests += 1
        try:
            items = self._fetch()
        except BaseException:
            with self._cond:
                self._in_flight = None
                self._cond.notify_all()
            raise
        with self._cond:
            if self._latest is None or sent >= self._latest.sent:
                self._latest = Reading(tuple(items), sent)
            self._in_flight = None
            self._cond.notify_all()
        return items


class PveClusters:
    """Clients, listings and vmid allocation of one command (see the module); thread-safe."""

    def __init__(
        self, inventory: Inventory, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inventory = inventory
        self._clock = clock
        self._lock = threading.Lock()
        self._login_locks: dict[str, threading.Lock] = {}
        self._clients: dict[str, PveClient] = {}
        self._login_failed: dict[str, DflashopsError] = {}
        self._listings: dict[str, SharedListing] = {}
        self._vmid_lock = threading.Lock()
        self._handed: dict[str, set[int]] = {}

    def now(self) -> float:
        """The clock listings are stamped with (``not_before`` values come from it)."""
        return self._clock()

    def client(self, cluster: str) -> PveClient:
        with self._lock:
            login = self._login_locks.setdefault(cluster, threading.Lock())
        with login:  # one login per cluster, however many threads ask at once
            if cluster in self._clients:
                return self._clients[cluster]
            if cluster in self._login_failed:
                raise copy.copy(self._login_failed[cluster])
            try:
                client = PveClient.for_cluster(self.inventory, cluster)
            except DflashopsError as exc:
                self._login_failed[cluster] = exc
                raise
            client.share_between_threads()
            self._clients[cluster] = client
            return client

    def resources(self, cluster: str, *, not_before: float | None = None) -> list[Resource]:
        """Every container of the cluster: the command's listing, or one read at
        ``not_before`` or later (:meth:`now`)."""
        with self._lock:
            listing = self._listings.get(cluster)
            if listing is None:
                listing = SharedListing(lambda: list_resources(self.client(cluster)), self._clock)
                self._listings[cluster] = listing
        return listing.get(not_before)

    def listing_requests(self, cluster: str) -> int:
        """How many listings of ``cluster`` this command sent."""
        with self._lock:
            listing = self._listings.get(cluster)
        return listing.requests if listing is not None else 0

    def allocate_vmid(self, cluster: str, floor: int | None) -> int:
        """A free vmid for a ``vmid: auto`` create: the lowest free one (at ``floor`` or above
        when given) that this command has not handed out yet and no container of the inventory
        names (it may be created at the same time), checked free by PVE's ``nextid``."""
        client = self.client(cluster)
        with self._vmid_lock:
            if cluster not in self._handed:  # the inventory's own vmids: created meanwhile
                self._handed[cluster] = {
                    ct.vmid
                    for ct in self.inventory.containers.values()
                    if ct.cluster == cluster and isinstance(ct.vmid, int)
                }
            handed = self._handed[cluster]
            if floor is None:
                candidate = client.next_vmid()
            else:
                candidate = floor
                taken = {r.vmid for r in self.resources(cluster)}
                handed |= {v for v in taken if v >= floor}
            while True:
                while candidate in handed:
                    candidate += 1
                try:
                    free = client.next_vmid(candidate)
                except ProxmoxError as exc:
                    if not is_already_exists(exc):  # a VM holds it, or someone just took it
                        raise
                    handed.add(candidate)
                    continue
                handed.add(free)
                return free
