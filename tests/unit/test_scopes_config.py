"""scopes.yaml: parsing, the loader skipping it, reloading it, and its analysis codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from xdscore import CLUSTER
from xdscore.analysis import SCOPE_EMPTY, SCOPE_SHADOWED, SCOPE_UNMATCHED_EGRESS, analyze_scopes
from xdscore.cache import NodeSelector, Scope, ScopedCache, SnapshotCache, same_for_all
from xdscore.config import ConfigError, load_directory, load_scopes, parse_scopes, reload_scopes
from xdscore.wire import make_node

from ..scope_mesh import mesh_resources, mesh_snapshot

FORM = """
scopes:
- name: team-a
  nodes: {cluster: team-a}
  egress: ["a/*", "shared/*"]
- name: by-id
  nodes: {id: "edge-*", metadata: {tier: edge}}
  egress: shared/*
  listeners: [ingress]
"""


def test_the_form_of_the_issue() -> None:
    first, second = parse_scopes(FORM)
    assert first == Scope(
        name="team-a", nodes=NodeSelector(cluster="team-a"), egress=("a/*", "shared/*")
    )
    assert second.nodes == NodeSelector(id="edge-*", metadata={"tier": "edge"})
    assert second.listeners == ("ingress",)
    assert parse_scopes("") == []


@pytest.mark.parametrize(
    "text",
    [
        "scopes: 3",
        "other: []",
        "scopes: [{nodes: {cluster: a}}]",
        "scopes: [{name: a, nodes: {pod: x}}]",
        "scopes: [{name: a, egress: [1]}]",
        "scopes: [{name: a}, {name: a}]",
        "scopes: [{name: a, extra: 1}]",
        "scopes: [",
    ],
)
def test_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_scopes(text)


def _directory(tmp_path: Path, scopes: str | None) -> Path:
    resources = [{"@type": r.type_url, **_json(r)} for r in mesh_resources(["a", "b", "shared"])]
    (tmp_path / "mesh.json").write_text(json.dumps({"resources": resources}))
    if scopes is not None:
        (tmp_path / "scopes.yaml").write_text(scopes)
    return tmp_path


def _json(resource: object) -> dict[str, object]:
    from xdscore.wire._messages import message_class

    message = message_class(resource.type_url).FromString(resource.body)  # type: ignore[attr-defined]
    return json_format.MessageToDict(message)


def test_the_loader_skips_the_file_and_reloads_apply_it(tmp_path: Path) -> None:
    directory = _directory(tmp_path, FORM)
    snapshot = load_directory(directory)
    assert len(snapshot.resources(CLUSTER) or {}) == 6
    source = SnapshotCache(group=same_for_all)
    source.set_snapshot(None, snapshot)
    cache = ScopedCache(source, load_scopes(directory))
    node = make_node(id="1", cluster="team-a")
    assert cache.scope_of(node) == "team-a"
    (directory / "scopes.yaml").write_text("scopes: [")
    assert not reload_scopes(cache, directory)
    assert cache.scope_of(node) == "team-a"
    (directory / "scopes.yaml").unlink()
    assert reload_scopes(cache, directory)
    assert cache.scope_of(node) is None


def test_analysis_codes() -> None:
    snapshot = mesh_snapshot(["a", "shared"])
    scopes = [
        Scope(name="a", nodes={"cluster": "a"}, egress=("a/*", "nowhere/*")),
        Scope(name="again", nodes={"cluster": "a", "id": "x"}, egress="a/*"),
        Scope(name="empty", nodes={"cluster": "e"}, listeners=(), egress=()),
        Scope(name="fine", nodes={"cluster": "f"}, egress="shared/*"),
    ]
    report = analyze_scopes(scopes, snapshot, where="scopes.yaml")
    found = sorted((d.code, d.name) for d in report)
    assert found == [
        (SCOPE_UNMATCHED_EGRESS, "a"),
        (SCOPE_SHADOWED, "again"),
        (SCOPE_EMPTY, "empty"),
    ]
    assert all(d.where == "scopes.yaml" for d in report)
