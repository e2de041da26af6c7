"""``xdscore diff``: what one Envoy holds against what its control plane means it to hold.

It reads Envoy's own ``/config_dump?include_eds`` from its admin endpoint and the control
plane's view of the same node over CSDS, and compares them resource by resource and version
by version, as ``istioctl proxy-status POD`` does: listeners (active, warming, in error),
clusters (active, warming), route configurations, endpoints (EDS) and secrets (SDS).

The comparison itself is pure (`compare` takes the parsed config dump and the CSDS
reports) so that it can be tested without processes. Both sides are put in the proto3 JSON
mapping and normalised the same way (`normalise`): ``@type`` keys are dropped, and for
endpoints the values Envoy fills in when it rebuilds a ``ClusterLoadAssignment`` from its host
set (weight 1, HEALTHY, the overprovisioning factor 140, empty localities and health-check
configs) are dropped on both sides. Leaves Envoy shows as ``[redacted]`` (secrets) match
anything.

The verdict is on content: where both sides' content is known and equal, the resource
matches whatever version labels they give it, and the labels that differ are said in a note
(and counted on the summary line). Labels count only where the content cannot be compared
(the control plane sent none): they depend on the protocol, which the bootstrap in the dump
tells:

* **Delta**: every resource carries its own version on both sides; they must be equal.
* **State of the World**: the control plane reports each resource at the version_info of
  the response that carried it, the last one Envoy accepted; Envoy keeps, per resource, the
  version of the response that last *changed* it, and per type (listeners, clusters) the
  version of the last response it applied anything of. After a response Envoy rejected in
  part (one listener of two could not bind), it keeps that response's label until something
  changes, while the control plane moves on: the same content, other labels. Envoy's dump
  gives endpoints no version; they are compared by content only.

A resource the control plane reports NACKED whose content Envoy holds, active and as
intended, matches (Envoy applied it from a response it rejected for another resource); the
NACK is shown with it.

With replicas (``--etcd``, or ``--server`` repeated), Envoy is compared with each replica
that has a client of its node. A resource that does not match is named with its source,
read from the control plane's admin ``/config_dump`` where its address is known.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import sys
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import anyio.to_thread
import attrs

from ..wire._csds import IdMatcher, ResourceReport
from ..wire._messages import resource_json
from ..wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE, SECRET, type_info
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_client_tls,
    address,
    client_ssl_context,
    positive,
)
from ._replicas import Answers, Replica, add_server_flags, ask_replicas, find_replicas, many

__all__ = [
    "STATES",
    "Comparison",
    "EnvoyResource",
    "ResourceDiff",
    "add_parser",
    "admin_sources",
    "compare",
    "dump_node_id",
    "dump_protocol",
    "envoy_resources",
    "field_diff",
    "normalise",
    "render_json",
    "render_text",
    "run",
]

STATES = ("ERROR", "MISSING", "EXTRA", "DIFFERS", "WARMING", "STALE", "MATCH")
"""Each resource's verdict, worst first:

* ERROR: Envoy holds the intended version in an error state, or the control plane says
  Envoy NACKed it and Envoy does not hold the intended content;
* MISSING: the control plane means Envoy to hold it, and Envoy does not;
* EXTRA: Envoy holds it, and the control plane does not mean it to;
* DIFFERS: Envoy holds other content than the control plane intends (or, where the
  content cannot be compared, another version);
* WARMING: Envoy holds the intended content, but is still warming it;
* STALE: Envoy holds the intended content, but the control plane does not report it
  SYNCED (Envoy's answer is outstanding, or the control plane has removed it);
* MATCH: the same on both sides.
"""

_WORDS = {
    "ERROR": "in error",
    "MISSING": "missing on Envoy",
    "EXTRA": "extra on Envoy",
    "DIFFERS": "different",
    "WARMING": "warming",
    "STALE": "stale",
    "MATCH": "matching",
}
_REDACTED = ("[redacted]", base64.b64encode(b"[redacted]").decode())
_ABSENT = "<absent>"
_SHOWN = 100
"""Characters of a value shown in a field difference."""


@attrs.frozen(kw_only=True)
class EnvoyResource:
    """One dynamic resource as Envoy's config dump shows it (proto3 JSON, as dumped)."""

    type_url: str
    name: str
    active: Mapping[str, Any] | None = None
    active_version: str = ""
    warming: Mapping[str, Any] | None = None
    warming_version: str = ""
    failed: Mapping[str, Any] | None = None
    """``error_state.failed_configuration``: the configuration Envoy rejected."""
    error: str = ""
    """``error_state.details``: Envoy's message."""

    @property
    def held(self) -> bool:
        """Envoy uses it or is warming it."""
        return self.active is not None or self.warming is not None


@attrs.frozen(kw_only=True)
class ResourceDiff:
    """The verdict on one resource, with what each side holds."""

    type_url: str
    name: str
    state: str
    """One of `STATES`."""
    envoy_holds: str = ""
    """``active``, ``warming``, ``error`` or several of them, comma-separated; "" if none."""
    envoy_version: str = ""
    plane_version: str = ""
    plane_status: str = ""
    """The control plane's ``config_status/client_status``; "" if it does not report it."""
    envoy_error: str = ""
    plane_error: str = ""
    fields: tuple[str, ...] = ()
    """Field-level differences, ``path: Envoy's value != the control plane's``."""
    notes: tuple[str, ...] = ()
    labels_differ: bool = False
    """It matches by content; Envoy's version labels for it are not the control plane's."""
    source: str = ""
    """Where the control plane's resource came from (a file and document, an etcd key and
    mod revision, an embedder's label), when its admin endpoint told; "" otherwise."""

    @property
    def short(self) -> str:
        """The type's short name (``lds``, ``cds``, ...)."""
        return type_info(self.type_url).short_name


@attrs.frozen(kw_only=True)
class Comparison:
    """Every resource of one node, compared."""

    node: str
    protocol: str
    """``sotw``, ``delta``, or "" when the dump has no bootstrap to tell."""
    resources: tuple[ResourceDiff, ...]
    not_compared: tuple[str, ...] = ()
    """Type URLs the control plane reports that Envoy's config dump does not show."""

    @property
    def in_sync(self) -> bool:
        """Every resource matches."""
        return all(r.state == "MATCH" for r in self.resources)

    def counts(self) -> dict[str, int]:
        """How many resources are in each state (states with none left out)."""
        found = [r.state for r in self.resources]
        return {state: found.count(state) for state in STATES if state in found}


# Envoy's config dump: (section type, list field, state, type URL, content field).
_SECTIONS = (
    ("ClustersConfigDump", "dynamic_active_clusters", "active", CLUSTER, "cluster"),
    ("ClustersConfigDump", "dynamic_warming_clusters", "warming", CLUSTER, "cluster"),
    ("RoutesConfigDump", "dynamic_route_configs", "active", ROUTE, "route_config"),
    ("EndpointsConfigDump", "dynamic_endpoint_configs", "active", ENDPOINT, "endpoint_config"),
    ("SecretsConfigDump", "dynamic_active_secrets", "active", SECRET, "secret"),
    ("SecretsConfigDump", "dynamic_warming_secrets", "warming", SECRET, "secret"),
)
_TYPE_VERSIONS = {"ListenersConfigDump": LISTENER, "ClustersConfigDump": CLUSTER}
_COMPARED = (LISTENER, ROUTE, CLUSTER, ENDPOINT, SECRET)


def _sections(config_dump: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The dump's sections by message name (``ListenersConfigDump``, ...)."""
    out: dict[str, Mapping[str, Any]] = {}
    for section in config_dump.get("configs", ()):
        name = str(section.get("@type", "")).rsplit(".", 1)[-1]
        out.setdefault(name, section)
    return out


def _name(type_url: str, content: Mapping[str, Any] | None) -> str:
    if content is None:
        return ""
    return str(content.get("cluster_name" if type_url == ENDPOINT else "name", ""))


class _Collected:
    """Envoy's states of each resource, merged by (type URL, name) as the dump is read."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, type_url: str, name: str, **states: Any) -> None:
        if not name:
            return
        entry = self.found.setdefault((type_url, name), {})
        for key, value in states.items():
            if value is not None and value != "" and key not in entry:
                entry[key] = value

    def add_error(self, type_url: str, name: str, error_state: Mapping[str, Any] | None) -> None:
        if error_state:
            failed = error_state.get("failed_configuration")
            self.add(
                type_url,
                name or _name(type_url, failed),
                failed=failed,
                error=str(error_state.get("details", "")) or "(no details)",
            )


def envoy_resources(config_dump: Mapping[str, Any]) -> dict[tuple[str, str], EnvoyResource]:
    """Each dynamic resource in Envoy's ``/config_dump``, by (type URL, name).

    A listener's entry may come in pieces (Envoy dumps an error state once more as an entry
    without a name); they are merged by the name of the rejected configuration. Static
    resources, and listeners only draining, are not included.
    """
    sections = _sections(config_dump)
    collected = _Collected()
    for entry in sections.get("ListenersConfigDump", {}).get("dynamic_listeners", ()):
        active = entry.get("active_state") or {}
        warming = entry.get("warming_state") or {}
        name = str(entry.get("name", "")) or _name(
            LISTENER, active.get("listener") or warming.get("listener")
        )
        collected.add(
            LISTENER,
            name,
            active=active.get("listener"),
            active_version=str(active.get("version_info", "")),
            warming=warming.get("listener"),
            warming_version=str(warming.get("version_info", "")),
        )
        collected.add_error(LISTENER, name, entry.get("error_state"))
    for section_name, field, state, type_url, content_field in _SECTIONS:
        for entry in sections.get(section_name, {}).get(field, ()):
            content = entry.get(content_field)
            name = _name(type_url, content) or str(entry.get("name", ""))
            collected.add(
                type_url,
                name,
                **{state: content, f"{state}_version": str(entry.get("version_info", ""))},
            )
            collected.add_error(type_url, name, entry.get("error_state"))
    return {
        key: EnvoyResource(type_url=key[0], name=key[1], **states)
        for key, states in collected.found.items()
    }


def _type_versions(config_dump: Mapping[str, Any]) -> dict[str, str]:
    """The version Envoy last accepted per type, where the dump says (listeners, clusters)."""
    sections = _sections(config_dump)
    return {
        type_url: str(sections[name]["version_info"])
        for name, type_url in _TYPE_VERSIONS.items()
        if sections.get(name, {}).get("version_info")
    }


def _bootstrap(config_dump: Mapping[str, Any]) -> Mapping[str, Any]:
    bootstrap: Mapping[str, Any] = _sections(config_dump).get("BootstrapConfigDump", {})
    return dict(bootstrap.get("bootstrap", {}))


def dump_node_id(config_dump: Mapping[str, Any]) -> str:
    """The node id in the dump's bootstrap ("" if the dump has none)."""
    return str(_bootstrap(config_dump).get("node", {}).get("id", ""))


def dump_protocol(config_dump: Mapping[str, Any]) -> str:
    """``delta`` or ``sotw``, as the bootstrap's ADS (else LDS) config source says; ""."""
    dynamic = _bootstrap(config_dump).get("dynamic_resources", {})
    source = dynamic.get("ads_config") or dynamic.get("lds_config", {}).get("api_config_source")
    if not source:
        return ""
    return "delta" if "DELTA" in str(source.get("api_type", "")) else "sotw"


def _strip_types(document: Any) -> Any:
    if isinstance(document, Mapping):
        return {k: _strip_types(v) for k, v in document.items() if k != "@type"}
    if isinstance(document, list):
        return [_strip_types(v) for v in document]
    return document


def _drop(document: dict[str, Any], key: str, *defaults: Any) -> None:
    if key in document and document[key] in defaults:
        del document[key]


def _endpoint_defaults(document: dict[str, Any]) -> dict[str, Any]:
    """Drop what Envoy fills in when it dumps endpoints rebuilt from its host set."""
    policy = document.get("policy")
    if isinstance(policy, dict):
        _drop(policy, "overprovisioning_factor", 140)
        _drop(document, "policy", {})
    for locality in document.get("endpoints", ()):
        _drop(locality, "locality", {})
        _drop(locality, "load_balancing_weight", 0)
        _drop(locality, "priority", 0)
        for lb_endpoint in locality.get("lb_endpoints", ()):
            _drop(lb_endpoint, "health_status", "HEALTHY", "UNKNOWN")
            _drop(lb_endpoint, "load_balancing_weight", 1)
            endpoint = lb_endpoint.get("endpoint")
            if isinstance(endpoint, dict):
                _drop(endpoint, "health_check_config", {})
    return document


def normalise(type_url: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` (proto3 JSON, from Envoy or from the control plane) made comparable."""
    out: dict[str, Any] = _strip_types(document)
    if type_url == ENDPOINT:
        out = _endpoint_defaults(out)
    return out


def _show(value: Any) -> str:
    if isinstance(value, dict | list):
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
    return repr(value)


def _same_leaf(envoy: Any, plane: Any) -> bool:
    if isinstance(envoy, str) and envoy in _REDACTED:
        return True
    numbers = (int, float)
    if isinstance(envoy, numbers) and isinstance(plane, numbers):
        if isinstance(envoy, bool) or isinstance(plane, bool):
            return type(envoy) is type(plane) and envoy == plane
        return bool(envoy == plane)
    return type(envoy) is type(plane) and bool(envoy == plane)


def field_diff(envoy: Any, plane: Any, path: str = "") -> list[str]:
    """Every leaf where two JSON trees differ, as ``path: envoy's != plane's``."""
    if isinstance(envoy, Mapping) and isinstance(plane, Mapping):
        out = []
        for key in sorted(envoy.keys() | plane.keys()):
            where = f"{path}.{key}" if path else key
            if key not in envoy:
                out.append(f"{where}: {_ABSENT} != {_show(plane[key])}")
            elif key not in plane:
                out.append(f"{where}: {_show(envoy[key])} != {_ABSENT}")
            else:
                out.extend(field_diff(envoy[key], plane[key], where))
        return out
    if isinstance(envoy, list) and isinstance(plane, list):
        out = []
        for index in range(max(len(envoy), len(plane))):
            where = f"{path}[{index}]"
            if index >= len(envoy):
                out.append(f"{where}: {_ABSENT} != {_show(plane[index])}")
            elif index >= len(plane):
                out.append(f"{where}: {_show(envoy[index])} != {_ABSENT}")
            else:
                out.extend(field_diff(envoy[index], plane[index], where))
        return out
    if _same_leaf(envoy, plane):
        return []
    return [f"{path or '(the resource)'}: {_show(envoy)} != {_show(plane)}"]


def _intended(report: ResourceReport) -> tuple[dict[str, Any] | None, str]:
    """The control plane's resource, normalised, or a note saying why there is none."""
    if report.resource is None:
        return None, "the control plane sent no content; versions compared only"
    try:
        return normalise(report.type_url, resource_json(report.resource)), ""
    except (KeyError, ValueError) as exc:
        return None, f"the control plane's resource does not decode: {exc}"


def _holds(envoy: EnvoyResource | None) -> str:
    if envoy is None:
        return ""
    parts = [
        ("active", envoy.active is not None),
        ("warming", envoy.warming is not None),
        ("error", bool(envoy.error)),
    ]
    return ", ".join(word for word, present in parts if present)


def _without_plane(envoy: EnvoyResource, report: ResourceReport | None) -> ResourceDiff:
    """A resource the control plane does not mean Envoy to hold."""
    notes = []
    if report is not None:
        notes.append("Envoy asked for it; the control plane says it does not exist")
    if envoy.type_url == ENDPOINT and not _has_endpoints(envoy):
        state = "MATCH"
        notes.append("Envoy holds no endpoints for it")
    elif envoy.held:
        state = "EXTRA"
        if report is None:
            notes.append("the control plane does not send it to this node")
    else:
        state = "MATCH"
        notes.append(f"neither holds it; Envoy still records a rejected version: {envoy.error}")
    return ResourceDiff(
        type_url=envoy.type_url,
        name=envoy.name,
        state=state,
        envoy_holds=_holds(envoy),
        envoy_version=envoy.active_version or envoy.warming_version,
        plane_status=_plane_status(report),
        plane_error=report.error.strip() if report is not None else "",
        envoy_error=envoy.error,
        notes=tuple(notes),
    )


def _has_endpoints(envoy: EnvoyResource) -> bool:
    content = envoy.active if envoy.active is not None else envoy.warming
    return content is not None and bool(normalise(ENDPOINT, content).get("endpoints"))


def _plane_status(report: ResourceReport | None) -> str:
    return "" if report is None else f"{report.config_status}/{report.client_status}"


def _labels(
    protocol: str, type_version: str, envoy: EnvoyResource, report: ResourceReport
) -> list[str]:
    """Envoy's version labels for a resource it uses that are not the control plane's."""
    mine, theirs = envoy.active_version, report.version
    if not theirs or envoy.active is None:
        return []
    labels = []
    acked = report.client_status == "ACKED"
    if protocol != "delta" and acked and type_version and type_version != theirs:
        short = type_info(report.type_url).short_name.upper()
        labels.append(f"{short} version: {type_version!r} != {theirs!r}")
    if mine and mine != theirs and (protocol == "delta" or mine != type_version):
        labels.append(f"version: {mine!r} != {theirs!r}")
    return labels


def _versions(
    protocol: str,
    type_version: str,
    envoy: EnvoyResource,
    report: ResourceReport,
    content_equal: bool | None,
) -> tuple[list[str], bool]:
    """(Version differences that count, whether only labels differ) for a resource Envoy
    uses (see the module's docstring): labels count only where the content cannot be
    compared; with the content equal they are reported, not held against Envoy."""
    labels = _labels(protocol, type_version, envoy, report)
    if not labels:
        return [], False
    if content_equal:
        return [], True
    if content_equal is None:
        return labels, False
    # The content differs (the fields say how); the type's label is worth showing too.
    return [label for label in labels if not label.startswith("version:")], False


def _with_plane(
    protocol: str, type_version: str, envoy: EnvoyResource | None, report: ResourceReport
) -> ResourceDiff:
    """A resource the control plane means Envoy to hold."""
    intended, note = _intended(report)
    notes = [note] if note else []
    envoy = envoy or EnvoyResource(type_url=report.type_url, name=report.name)
    active = normalise(envoy.type_url, envoy.active) if envoy.active is not None else None
    warming = normalise(envoy.type_url, envoy.warming) if envoy.warming is not None else None
    shown = active if active is not None else warming
    fields = field_diff(shown, intended) if shown is not None and intended is not None else []
    content_equal = None if intended is None or active is None else not fields
    problems, only_labels = _versions(protocol, type_version, envoy, report, content_equal)
    if only_labels:
        notes.append(
            "the same content under other version labels: "
            + "; ".join(_labels(protocol, type_version, envoy, report))
            + " (labels name the response that carried or last changed it)"
        )
    nacked = report.client_status == "NACKED"
    error = False
    if envoy.error:
        if envoy.failed is None or intended is None:
            error = nacked
        else:
            error = not field_diff(normalise(envoy.type_url, envoy.failed), intended)
        if not error:
            notes.append(f"Envoy still records an earlier rejected version: {envoy.error}")
    synced = report.config_status == "SYNCED"
    if nacked and not error and content_equal:
        # The response that carried it was rejected for another resource, and Envoy
        # applied this one nonetheless: what it holds is what is meant.
        nacked, synced = False, True
        notes.append(
            "the control plane last heard Envoy reject a response that carried it, yet "
            "Envoy holds it as intended"
        )
    if error or nacked:
        state = "ERROR"
    elif not envoy.held:
        state = "MISSING"
    elif active is not None and not fields and not problems:
        state = "MATCH" if synced else "STALE"
    elif warming is not None and intended is not None and not field_diff(warming, intended):
        state = "WARMING"
    else:
        state = "DIFFERS"
    if state == "MISSING" and report.client_status == "REQUESTED":
        notes.append("the control plane reports it REQUESTED: not sent yet, or not answered")
    return ResourceDiff(
        type_url=report.type_url,
        name=report.name,
        state=state,
        envoy_holds=_holds(envoy),
        envoy_version=envoy.active_version or envoy.warming_version,
        plane_version=report.version,
        plane_status=_plane_status(report),
        envoy_error=envoy.error if error else "",
        plane_error=report.error.strip(),
        fields=(*problems, *fields),
        notes=tuple(notes),
        labels_differ=only_labels and state == "MATCH",
    )


def _eds_names(envoy: Mapping[tuple[str, str], EnvoyResource]) -> set[str]:
    """The endpoint names Envoy's EDS clusters take (the others' endpoints are inline)."""
    names = set()
    for (type_url, name), resource in envoy.items():
        if type_url != CLUSTER:
            continue
        for cluster in (resource.active, resource.warming):
            if cluster is not None and cluster.get("type") == "EDS":
                config = cluster.get("eds_cluster_config") or {}
                names.add(str(config.get("service_name") or name))
    return names


def compare(
    config_dump: Mapping[str, Any],
    reports: Iterable[ResourceReport],
    *,
    node: str = "",
    sources: Mapping[tuple[str, str], str] | None = None,
) -> Comparison:
    """Compare Envoy's parsed ``/config_dump?include_eds`` with the CSDS reports of its
    node, resource by resource; pure. ``sources`` (by type URL and name, from the control
    plane's admin endpoint: `admin_sources`) name where each resource came from."""
    envoy = envoy_resources(config_dump)
    protocol = dump_protocol(config_dump)
    type_versions = _type_versions(config_dump)
    plane: dict[tuple[str, str], ResourceReport] = {}
    not_compared = set()
    for given in reports:
        if given.type_url in _COMPARED:
            plane.setdefault((given.type_url, given.name), given)
        else:
            not_compared.add(given.type_url)
    eds_names = _eds_names(envoy)
    keys = set(plane) | {
        key for key in envoy if key[0] != ENDPOINT or key[1] in eds_names or key in plane
    }
    out = []
    for key in keys:
        report, held = plane.get(key), envoy.get(key)
        if report is None or report.client_status == "DOES_NOT_EXIST":
            if held is not None:
                out.append(_without_plane(held, report))
            elif report is not None:
                out.append(
                    ResourceDiff(
                        type_url=report.type_url,
                        name=report.name,
                        state="MATCH",
                        plane_status=_plane_status(report),
                        notes=("Envoy asked for it; neither side has it",),
                    )
                )
            continue
        out.append(_with_plane(protocol, type_versions.get(key[0], ""), held, report))
    if sources:
        out = [
            attrs.evolve(r, source=sources[(r.type_url, r.name)])
            if (r.type_url, r.name) in sources
            else r
            for r in out
        ]
    out.sort(key=lambda r: (type_info(r.type_url).rank, r.type_url, r.name))
    return Comparison(
        node=node or dump_node_id(config_dump),
        protocol=protocol,
        resources=tuple(out),
        not_compared=tuple(sorted(not_compared)),
    )


_PROTOCOLS = {"sotw": "State of the World", "delta": "Delta", "": "protocol unknown"}


def render_text(comparison: Comparison) -> str:
    """One block per resource, worst first, under a summary line."""
    counts = ", ".join(f"{n} {_WORDS[state]}" for state, n in comparison.counts().items())
    verdict = "in sync" if comparison.in_sync else "NOT IN SYNC"
    relabelled = sum(r.labels_differ for r in comparison.resources)
    if relabelled:
        counts += f" ({relabelled} under other version labels, the same content)"
    lines = [
        f"node {comparison.node} ({_PROTOCOLS.get(comparison.protocol, comparison.protocol)}):"
        f" {verdict}: {counts or 'nothing to compare'}"
    ]
    if any(r.fields for r in comparison.resources):
        lines.append("(differences read: field: Envoy's value != the control plane's)")
    ordered = sorted(comparison.resources, key=lambda r: STATES.index(r.state))
    width = max((len(r.name) for r in ordered), default=0)
    for r in ordered:
        envoy = f"envoy {r.envoy_version or '-'}" + (f" ({r.envoy_holds})" if r.envoy_holds else "")
        plane = f"control plane {r.plane_version or '-'}" + (
            f" ({r.plane_status})" if r.plane_status else ""
        )
        lines.append(f"{r.state:<8} {r.short:<4} {r.name:<{width}}  {envoy}  {plane}")
        if r.source and r.state != "MATCH":
            lines.append(f"    source: {r.source}")
        if r.envoy_error:
            lines.append(f"    Envoy's error: {r.envoy_error}")
        if r.plane_error:
            lines.append(f"    NACK the control plane received: {r.plane_error}")
        lines.extend(f"    {field}" for field in r.fields)
        lines.extend(f"    note: {note}" for note in r.notes)
    for type_url in comparison.not_compared:
        lines.append(f"not compared (not in Envoy's config dump): {type_url}")
    return "\n".join(lines)


def render_json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as one JSON document."""
    return {
        "node": comparison.node,
        "protocol": comparison.protocol,
        "in_sync": comparison.in_sync,
        "counts": comparison.counts(),
        "labels_differ": sum(r.labels_differ for r in comparison.resources),
        "resources": [{"type": r.short, **attrs.asdict(r)} for r in comparison.resources],
        "not_compared": list(comparison.not_compared),
    }


def admin_sources(config_dump: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """Each resource's source in the control plane's admin ``/config_dump?node=ID``, by
    (type URL, name) (resources whose source is not said left out)."""
    out = {}
    for entry in config_dump.get("types", ()):
        for resource in entry.get("resources", ()):
            if resource.get("source"):
                out[(str(entry["type_url"]), str(resource["name"]))] = str(resource["source"])
    return out


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``diff`` and its flags."""
    diff = commands.add_parser(
        "diff",
        help="compare what one Envoy holds with what the control plane means it to hold",
        description="Read Envoy's /config_dump?include_eds from its admin endpoint and the "
        "control plane's view of the same node over CSDS, and compare them resource by "
        "resource: what matches, what differs (field by field), what Envoy lacks, what it "
        "has that it should not, and what it holds in an error state; a resource that does "
        "not match is named with its source when the control plane's admin endpoint is "
        "known (--admin, or registered with --etcd). With --etcd or several --server, every "
        "replica is asked, and Envoy is compared with each replica it is connected to. "
        "Exits 0 when in sync, 1 when anything differs or a replica cannot be asked, 2 when "
        "Envoy, or the only control plane given, cannot be asked.",
    )
    add_server_flags(diff, "the comparison")
    diff.add_argument(
        "--envoy-admin",
        type=address,
        required=True,
        metavar="HOST:PORT",
        help="Envoy's admin endpoint",
    )
    diff.add_argument(
        "--admin",
        type=address,
        metavar="HOST:PORT",
        help="with one --server, that control plane's admin endpoint (serve --admin), read "
        "to name where each resource that does not match came from (with --etcd, the "
        "replicas' registered ones are read)",
    )
    diff.add_argument(
        "--node", default="", metavar="ID", help="the node id (default: the one Envoy reports)"
    )
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.add_argument(
        "--timeout",
        type=positive(float),
        default=10.0,
        metavar="SECONDS",
        help="per request (default 10)",
    )
    add_client_tls(diff)


class _CannotAsk(Exception):
    """One side could not be asked; the message is the one line printed."""


def _get_json(host: str, port: int, path: str, timeout: float, what: str = "Envoy admin") -> Any:
    """GET ``path`` from an HTTP server and parse the body as JSON (blocking)."""
    where = f"{what} at {host}:{port}{path}"
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _CannotAsk(f"{where}: {str(exc) or type(exc).__name__}") from None
    finally:
        connection.close()
    if response.status != 200:
        first = body.decode(errors="replace").strip().splitlines()[:1]
        raise _CannotAsk(f"{where}: HTTP {response.status} {' '.join(first)}".rstrip())
    try:
        return json.loads(body)
    except ValueError as exc:
        raise _CannotAsk(f"{where}: not JSON: {exc}") from None


async def _envoy(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Envoy's config dump and node id."""
    host, port = args.envoy_admin
    dump = await anyio.to_thread.run_sync(
        _get_json, host, port, "/config_dump?include_eds", args.timeout
    )
    node = args.node or dump_node_id(dump)
    if not node:
        info = await anyio.to_thread.run_sync(_get_json, host, port, "/server_info", args.timeout)
        node = str(info.get("node", {}).get("id", ""))
    if not node:
        raise _CannotAsk(f"Envoy at {host}:{port} reports no node id; give --node")
    return dump, node


async def _sources(admin: str, node: str, timeout: float) -> dict[tuple[str, str], str]:
    """Where each resource of ``node`` came from, as the admin endpoint at ``admin`` says;
    nothing (after a warning on stderr) when it cannot be asked."""
    if not admin:
        return {}
    host, port = address(admin)
    path = "/config_dump?node=" + urllib.parse.quote(node, safe="")
    try:
        found = await anyio.to_thread.run_sync(
            _get_json, host, port, path, timeout, "control plane admin"
        )
    except _CannotAsk as exc:
        print(f"xdscore: sources not shown: {exc}", file=sys.stderr)
        return {}
    return admin_sources(found)


def _show_comparisons(
    args: argparse.Namespace, compared: list[tuple[Replica, Comparison]], answers: Answers
) -> None:
    """Print the comparisons, each labelled with its replica when replicas were asked."""
    if not many(args):
        ((_, comparison),) = compared
        if args.format == "json":
            print(json.dumps(render_json(comparison), indent=2))
        else:
            print(render_text(comparison))
        return
    if args.format == "json":
        document = {
            "comparisons": [
                {"replica": replica.label, **render_json(comparison)}
                for replica, comparison in compared
            ],
            "unanswered": list(answers.unanswered),
        }
        print(json.dumps(document, indent=2))
        return
    print("\n\n".join(f"replica {r.label}: {render_text(c)}" for r, c in compared))


async def run(args: argparse.Namespace) -> int:
    """Run ``diff``; the exit status."""
    if args.admin is not None and many(args):
        print("xdscore diff: --admin goes with one --server", file=sys.stderr)
        return EXIT_USAGE
    try:
        context = client_ssl_context(args)
    except ValueError as exc:
        print(f"xdscore diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        dump, node = await _envoy(args)
    except _CannotAsk as exc:
        print(f"xdscore: {exc}", file=sys.stderr)
        return EXIT_USAGE
    replicas = await find_replicas(args)
    if isinstance(replicas, int):
        return replicas
    if args.admin is not None:
        replicas = [attrs.evolve(replicas[0], admin=f"{args.admin[0]}:{args.admin[1]}")]
    answers = await ask_replicas(
        replicas, [IdMatcher("exact", node)], context, timeout=args.timeout
    )
    found = answers.of_node(node)
    answers.say_unanswered()
    if not found:
        if not many(args):  # the one control plane given could not be asked, or lacks it
            if not answers.unanswered:
                print(
                    f"xdscore: control plane at {replicas[0].xds} has no client with node "
                    f"id {node!r}",
                    file=sys.stderr,
                )
            return EXIT_USAGE
        print(
            f"xdscore: {answers.without()} has a client with node id {node!r}",
            file=sys.stderr,
        )
        return EXIT_FAILED if answers.unanswered else EXIT_USAGE
    compared = []
    for replica, reports in found:
        sources = await _sources(replica.admin, node, args.timeout)
        compared.append((replica, compare(dump, reports, node=node, sources=sources)))
    _show_comparisons(args, compared, answers)
    if answers.unanswered:
        return EXIT_FAILED
    return EXIT_OK if all(c.in_sync for _, c in compared) else EXIT_FAILED
