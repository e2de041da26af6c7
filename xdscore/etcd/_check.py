"""Turning what etcd holds under a prefix into resources, and checking them as a config
directory is checked ([`xdscore.analysis.analyze`][xdscore.analysis.analyze]). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ..analysis import Diagnostic, analyze
from ..cache._snapshot import Snapshot
from ..wire._messages import import_all_protos
from ..wire._resource import Resource
from ..wire._typeurls import all_types
from ._layout import LayoutError, decode_entry

__all__ = ["Evaluation", "check_resources", "evaluate"]


@attrs.frozen
class Evaluation:
    """The resources of one state and what is wrong with it.

    ``problems`` are the reasons to refuse it (keys outside the layout, ERROR diagnostics),
    each ``"KEY: reason"``; ``warnings`` the WARNING diagnostics, which do not refuse it.
    """

    resources: tuple[Resource, ...]
    problems: tuple[str, ...]
    warnings: tuple[Diagnostic, ...] = ()
    keys: Mapping[tuple[str, str], str] = attrs.field(factory=dict)
    """The key each resource was read from, by (type URL, name)."""

    def snapshot(
        self,
        *,
        mods: Mapping[str, int] | None = None,
        revision: int | None = None,
        prefix: str = "",
    ) -> Snapshot:
        """The resources as a snapshot authoritative for every registered type; each
        resource's provenance is its key (and the key's mod revision, from ``mods``), and
        the snapshot is labelled with the etcd ``revision`` it was read at."""
        mods = mods or {}
        provenance = {
            found: f"{key} (mod revision {mods[key]})" if key in mods else key
            for found, key in self.keys.items()
        }
        return Snapshot(
            self.resources,
            types=[info.type_url for info in all_types()],
            provenance=provenance,
            label="" if revision is None else f"etcd revision {revision} under {prefix}",
            store_revision=revision,
        )


def check_resources(
    pairs: Iterable[tuple[str, Resource]], *, complete: bool = True
) -> tuple[list[str], tuple[Diagnostic, ...]]:
    """The problems (ERROR diagnostics, ``"where: CODE message"``) and the warnings of
    ``(where, resource)`` pairs, as [`xdscore.config.load_directory`][xdscore.config.load_directory]
    judges them."""
    report = analyze(list(pairs), complete=complete)
    problems = [f"{d.where}: {d.code} {d.message}" for d in report.errors]
    return problems, report.warnings


def evaluate(prefix: str, kvs: Mapping[bytes, bytes], *, complete: bool = True) -> Evaluation:
    """The state the keys and values under ``prefix`` describe, checked.

    A key outside the layout, or of a type protobuf does not know, is a problem; so is an
    ERROR diagnostic (a dangling reference, bytes that do not parse as the type, a name
    that differs from the message's, ...). With ``complete`` every registered type counts
    as present, as for a config directory: the prefix is the only source of its server.
    """
    import_all_protos()
    pairs: list[tuple[str, Resource]] = []
    problems: list[str] = []
    for key in sorted(kvs):
        where = key.decode(errors="replace")
        try:
            resource = decode_entry(prefix, key, kvs[key])
        except LayoutError as exc:
            problems.append(f"{where}: {exc}")
            continue
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}: {exc}")
            continue
        if resource is not None:
            pairs.append((where, resource))
    if pairs or problems:
        found, warnings = check_resources(pairs, complete=complete)
        problems += found
    else:
        warnings = ()
    return Evaluation(
        tuple(resource for _, resource in pairs),
        tuple(problems),
        warnings,
        {(resource.type_url, resource.name): where for where, resource in pairs},
    )
