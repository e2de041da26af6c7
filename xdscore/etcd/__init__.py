"""etcd as a configuration source: the key layout, a writer, and a source feeding caches.

Resources live one per key, ``{prefix}/{protobuf full message name}/{resource name}``, the
value being the resource's encoded message (see `xdscore.etcd._layout`).
[`apply_state`][xdscore.etcd.apply_state] writes a whole desired state as one transaction;
[`EtcdSource`][xdscore.etcd.EtcdSource] follows the prefix and feeds a
[`SnapshotCache`][xdscore.SnapshotCache] or [`LinearCache`][xdscore.LinearCache] one whole revision
at a time. The client is ``aetcd`` (``pip install 'xdscore[etcd]'``), imported on first use:
importing this package does not need it. The guide is ``docs/etcd.md``.
"""

from ._check import Evaluation, evaluate
from ._client import EtcdError, connect, parse_url
from ._layout import (
    DEFAULT_PREFIX,
    MARKER,
    Change,
    Diff,
    LayoutError,
    diff,
    encode_state,
    parse_key,
    resource_key,
)
from ._source import EtcdSource, Outcome
from ._writer import ApplyConflict, ApplyResult, StateRefused, apply_state, read_state

__all__ = [
    "DEFAULT_PREFIX",
    "MARKER",
    "ApplyConflict",
    "ApplyResult",
    "Change",
    "Diff",
    "EtcdError",
    "EtcdSource",
    "Evaluation",
    "LayoutError",
    "Outcome",
    "StateRefused",
    "apply_state",
    "connect",
    "diff",
    "encode_state",
    "evaluate",
    "parse_key",
    "parse_url",
    "read_state",
    "resource_key",
]
