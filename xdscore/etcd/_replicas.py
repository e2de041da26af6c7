"""Replicas of one prefix say where they are: a lease-bound key each, under the prefix.

``xdscore serve --etcd`` writes ``{prefix}/.replicas/{replica id}`` (a reserved key: sources
ignore it, ``apply`` leaves it alone) holding its xDS and admin addresses, bound to a lease
of `REPLICA_TTL` seconds that it refreshes every third of that, and revokes when it
stops. A replica that dies without stopping keeps its key until the lease lapses: readers
(``xdscore wait``, ``apply --wait``) name it as one that cannot be asked.
"""

from __future__ import annotations

import json
import logging

import anyio
import attrs

from ._client import EtcdClient, EtcdError, client_errors, describe
from ._layout import normalize_prefix

__all__ = ["REPLICA_TTL", "ReplicaEntry", "read_replicas", "register_replica", "replica_key"]

log = logging.getLogger("xdscore.etcd")

REPLICA_TTL = 30
"""Seconds a replica's key outlives the replica (its lease's time to live)."""

_FOLDER = ".replicas"


@attrs.frozen
class ReplicaEntry:
    """One replica as it registered: its id, and its xDS and admin addresses (``HOST:PORT``;
    ``admin`` "" when it serves none)."""

    replica: str
    xds: str
    admin: str = ""


def replica_key(prefix: str, replica: str) -> bytes:
    """The key replica ``replica`` of ``prefix`` registers under."""
    return f"{normalize_prefix(prefix)}/{_FOLDER}/{replica}".encode()


async def register_replica(
    client: EtcdClient, prefix: str, entry: ReplicaEntry, *, ttl: int = REPLICA_TTL
) -> None:
    """Keep ``entry`` registered until cancelled (then revoke it). etcd unreachable is
    logged and retried: serving never depends on it."""
    key = replica_key(prefix, entry.replica)
    value = json.dumps(attrs.asdict(entry)).encode()
    lease = None
    try:
        while True:
            try:
                if lease is None:
                    lease = await client.lease(ttl)
                    await client.put(key, value, lease=lease)
                    log.info("registered replica %s under %s", entry.replica, key.decode())
                else:
                    refreshed = await client.refresh_lease(lease.id)
                    if refreshed is None or refreshed.TTL <= 0:
                        lease = None  # it lapsed (etcd was away): register again
                        continue
            except client_errors() as exc:
                log.warning("cannot register replica %s in etcd: %s", entry.replica, describe(exc))
                lease = None
            await anyio.sleep(ttl / 3)
    finally:
        if lease is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                try:
                    await client.revoke_lease(lease.id)
                except client_errors():
                    pass  # it lapses by itself


async def read_replicas(client: EtcdClient, prefix: str) -> list[ReplicaEntry]:
    """The replicas registered under ``prefix`` now, by id; `EtcdError` when etcd
    cannot be asked. Entries that do not parse are skipped."""
    start = replica_key(prefix, "")
    try:
        found = await client.get_range(start, start[:-1] + b"0")
    except client_errors() as exc:
        raise EtcdError(f"cannot read the replicas of {prefix!r}: {describe(exc)}") from exc
    entries = []
    for kv in found.kvs:
        try:
            entries.append(ReplicaEntry(**json.loads(bytes(kv.value))))
        except (TypeError, ValueError):
            log.warning("skipping %s: not a replica entry", bytes(kv.key).decode(errors="replace"))
    return sorted(entries, key=lambda e: e.replica)
