"""Writing a whole desired state under a prefix as one etcd transaction.

An apply reads the prefix (one range read, at revision R), computes the difference with
the desired state, and commits it in one transaction: a put for each new or changed
resource, a delete for each removed one, nothing for the unchanged, and a put of the apply
marker. The transaction is guarded by one compare: no key of the prefix was modified after
R. The marker is in the prefix and every apply writes it, so two applies that both read R
cannot both commit, deletions included: the one that loses reads again and retries, up to
``attempts`` times, then gives up with [`ApplyConflict`][xdscore.etcd.ApplyConflict]. One apply is
one revision, which every [`EtcdSource`][xdscore.etcd.EtcdSource] applies whole.

A writer that is not xdscore's (``etcdctl``, another program) and only deletes keys does
not touch the marker: such a deletion racing an apply is not detected.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

import attrs

from ..wire._resource import Resource
from ._check import check_resources
from ._client import EtcdClient, EtcdError, aetcd, client_errors, describe
from ._layout import (
    DEFAULT_PREFIX,
    Diff,
    diff,
    encode_state,
    marker_key,
    normalize_prefix,
    range_end,
    range_start,
    reserved,
    state_digest,
)

__all__ = [
    "ApplyConflict",
    "ApplyResult",
    "StateRefused",
    "apply_state",
    "read_state",
    "read_state_with_mods",
]

log = logging.getLogger("xdscore.etcd")


class ApplyConflict(EtcdError):
    """Other writers kept changing the prefix between this apply's read and its commit."""


class StateRefused(ValueError):
    """The desired state fails the checks every source would refuse it for."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        listing = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{len(problems)} problem(s) in the state to apply:\n{listing}")


@attrs.frozen
class ApplyResult:
    """What an apply did: the revision etcd is at afterwards (the one it read, when nothing
    was written), the difference, and whether a transaction was committed."""

    revision: int
    diff: Diff
    written: bool
    attempts: int = 1


async def read_state(
    client: EtcdClient, prefix: str = DEFAULT_PREFIX
) -> tuple[int, dict[bytes, bytes]]:
    """Every key and value under ``prefix`` in one range read, and the revision read at."""
    revision, kvs, _ = await read_state_with_mods(client, prefix)
    return revision, kvs


async def read_state_with_mods(
    client: EtcdClient, prefix: str = DEFAULT_PREFIX
) -> tuple[int, dict[bytes, bytes], dict[bytes, int]]:
    """`read_state`, and each key's ``mod_revision`` (the revision that last wrote it)."""
    try:
        found = await client.get_range(range_start(prefix), range_end(prefix))
    except client_errors() as exc:
        raise EtcdError(
            f"cannot read {normalize_prefix(prefix)!r} from etcd: {describe(exc)}"
        ) from exc
    kvs = {bytes(kv.key): bytes(kv.value) for kv in found.kvs}
    return (
        int(found.header.revision),
        kvs,
        {bytes(kv.key): int(kv.mod_revision) for kv in found.kvs},
    )


async def apply_state(
    client: EtcdClient,
    resources: Iterable[Resource],
    *,
    prefix: str = DEFAULT_PREFIX,
    dry_run: bool = False,
    check: bool = True,
    complete: bool = True,
    attempts: int = 5,
) -> ApplyResult:
    """Make ``resources`` the whole state under ``prefix``, in one transaction.

    Raises [`StateRefused`][xdscore.etcd.StateRefused] (before anything is read) when ``check``
    finds what a source would refuse the state for (see [`EtcdSource`][xdscore.etcd.EtcdSource],
    ``complete`` as there); ``ValueError`` for duplicates or aliases;
    [`ApplyConflict`][xdscore.etcd.ApplyConflict] when other writers won ``attempts`` times;
    [`EtcdError`][xdscore.etcd.EtcdError] when etcd cannot be reached or refuses the transaction
    (its size limits included). With ``dry_run`` nothing is written: the result holds the difference
    against the revision read.
    """
    given = list(resources)
    desired = encode_state(prefix, given)
    if check:
        where = {(r.type_url, r.name): key.decode() for r, key in zip(given, desired, strict=True)}
        problems, _ = check_resources(
            ((where[(r.type_url, r.name)], r) for r in given), complete=complete
        )
        if not given:
            problems.append("no resources: a source refuses to serve nothing")
        if problems:
            raise StateRefused(problems)
    module = aetcd()
    marker = json.dumps({"resources": len(desired), "digest": state_digest(desired)}).encode()
    for attempt in range(1, attempts + 1):
        revision, current = await read_state(client, prefix)
        changes = diff(prefix, current, desired)
        if dry_run or not changes:
            return ApplyResult(revision, changes, written=False, attempts=attempt)
        ops = module.transactions
        success = [
            ops.Put(key, value) for key, value in desired.items() if current.get(key) != value
        ]
        # Reserved keys (the marker, replicas' registrations) are not the state's.
        success += [
            ops.Delete(key) for key in current if key not in desired and not reserved(prefix, key)
        ]
        success.append(ops.Put(marker_key(prefix), marker))
        guard = ops.Mod(range_start(prefix), range_end(prefix)) < revision + 1
        try:
            committed, responses = await client.transaction(
                compare=[guard], success=success, failure=[]
            )
        except client_errors() as exc:
            raise EtcdError(
                f"etcd refused the transaction of {len(changes)} change(s): {describe(exc)}"
            ) from exc
        if committed:
            # The marker's put comes last; its header carries the transaction's revision.
            written = int(responses[-1].response_put.header.revision)
            log.info(
                "applied %s under %s at revision %d",
                changes.summary(),
                normalize_prefix(prefix),
                written,
            )
            return ApplyResult(written, changes, written=True, attempts=attempt)
        log.info(
            "the prefix %s changed after revision %d (attempt %d of %d); reading it again",
            normalize_prefix(prefix),
            revision,
            attempt,
            attempts,
        )
    raise ApplyConflict(
        f"other writers changed {normalize_prefix(prefix)!r} during each of {attempts} attempts "
        "to apply; nothing was written"
    )
