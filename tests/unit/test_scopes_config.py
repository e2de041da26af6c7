"""scopes.yaml: parsing, the loader skipping it, reloading it, and its analysis codes."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from google.protobuf import json_format

from xdscore import CLUSTER, SECRET, builders, make_resource
from xdscore.analysis import (
    SCOPE_EMPTY,
    SCOPE_SHADOWED,
    SCOPE_SHARED_SECRET,
    SCOPE_UNMATCHED_EGRESS,
    analyze_scopes,
)
from xdscore.cache import NodeSelector, Scope, Snapshot, SnapshotCache, Unselected, same_for_all
from xdscore.config import (
    ConfigError,
    ScopesFile,
    load_directory,
    load_scopes,
    parse_scopes,
    reload_scopes,
)
from xdscore.wire import all_types, make_node

from ..factories import secret, tls_cluster
from ..scope_mesh import mesh_resources, mesh_snapshot

TYPES = [info.type_url for info in all_types()]

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
    parsed = parse_scopes(FORM)
    first, second = parsed.scopes
    assert first == Scope(
        name="team-a", nodes=NodeSelector(cluster="team-a"), egress=("a/*", "shared/*")
    )
    assert second.nodes == NodeSelector(id="edge-*", metadata={"tier": "edge"})
    assert second.listeners == ("ingress",)
    # With scopes listed and no default, a node no scope selects gets nothing.
    assert parsed.default is Unselected.NOTHING
    # No scope, no default: no scopes at all, every node sees everything.
    assert parse_scopes("") == ScopesFile((), Unselected.EVERYTHING)
    assert parse_scopes("scopes: []") == ScopesFile((), Unselected.EVERYTHING)


@pytest.mark.parametrize(
    ("line", "default"),
    [
        ("default: nothing", Unselected.NOTHING),
        ("default: everything", Unselected.EVERYTHING),
        ("default: by-id", "by-id"),
    ],
)
def test_the_default_for_a_node_no_scope_selects(line: str, default: object) -> None:
    assert parse_scopes(f"{FORM}{line}\n").default == default


def test_the_fields_scopes_select_on_and_those_a_binding_leaves_free() -> None:
    parsed = parse_scopes(FORM)
    assert [scope.nodes.fields for scope in parsed.scopes] == [
        frozenset({"cluster"}),
        frozenset({"id", "metadata.tier"}),
    ]
    assert parsed.unbound({"id"}) == [("team-a", ["cluster"]), ("by-id", ["metadata.tier"])]
    assert parsed.unbound({"id", "cluster"}) == [("by-id", ["metadata.tier"])]
    assert parsed.unbound({"id", "cluster", "metadata.tier"}) == []
    # A scope whose selector is empty selects every node, by no field.
    assert parse_scopes("scopes: [{name: all}]").unbound(()) == []


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
        "scopes: [{name: a}]\ndefault: b",
        "scopes: [{name: a}]\ndefault: [a]",
        "scopes: [{name: nothing}]",
        "scopes: [{name: everything}]",
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
    cache = load_scopes(directory).cache(source)
    node = make_node(id="1", cluster="team-a")
    assert cache.scope_of(node) == "team-a"
    (directory / "scopes.yaml").write_text("scopes: [")
    assert not reload_scopes(cache, directory)
    assert cache.scope_of(node) == "team-a"
    # A check the caller gives (serve's: the node binding covers every selected field)
    # refuses a file as one that does not parse is refused.
    (directory / "scopes.yaml").write_text("scopes: [{name: b, nodes: {cluster: team-a}}]")
    assert not reload_scopes(cache, directory, lambda scopes: "selects by cluster")
    assert cache.scope_of(node) == "team-a"
    assert reload_scopes(cache, directory, lambda scopes: None)
    assert cache.scope_of(node) == "b"
    (directory / "scopes.yaml").unlink()
    assert reload_scopes(cache, directory)
    assert cache.scope_of(node) is None
    assert cache.default is Unselected.EVERYTHING


def test_a_yaml_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "scopes.yaml").write_text("scopes:\n- name: a\n  egress: [x, y\n")
    with pytest.raises(ConfigError) as refused:
        load_scopes(tmp_path)
    (problem,) = refused.value.problems
    assert str(problem) == (
        f"{tmp_path / 'scopes.yaml'}: cannot be read: line 4, column 1: expected ',' or ']', "
        "but got '<stream end>' (while parsing a flow sequence that began at line 3, column 11)"
    )
    assert problem.line == 4


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


def test_a_private_secret_two_scopes_see_is_reported() -> None:
    """XDS015: a key every scope's proxies can read crosses the boundary scopes draw."""
    resources = mesh_resources(["a", "b", "shared"], tls=["a", "b", "shared"])
    key = secret("shared-key")
    key.tls_certificate.private_key.inline_string = "PRIVATE KEY"
    resources += [
        make_resource(key),
        make_resource(tls_cluster("shared/keyed", certificates=["shared-key"])),
        make_resource(builders.load_assignment("shared/keyed", [("127.0.0.1", 8000)])),
    ]
    snapshot = Snapshot(resources, types=TYPES)
    scopes = [
        Scope(name="a", nodes={"cluster": "a"}, egress=("a/*", "shared/*")),
        Scope(name="b", nodes={"cluster": "b"}, egress=("b/*", "shared/*")),
        Scope(name="alone", nodes={"cluster": "c"}, egress="b/*"),
    ]
    report = analyze_scopes(scopes, snapshot, where="scopes.yaml")
    # shared-cert is seen by both, but holds no private part; a-cert and b-cert by one each.
    (found,) = [d for d in report if d.code == SCOPE_SHARED_SECRET]
    assert (found.type_url, found.name) == (SECRET, "shared-key")
    assert found.message == (
        "secret 'shared-key' holds private parts (a key, a password) and scopes 'a', 'b' all "
        "see it: the proxies of each can read it"
    )
    narrower = [scopes[0], attrs.evolve(scopes[1], egress=("b/*",))]
    assert not [d for d in analyze_scopes(narrower, snapshot) if d.code == SCOPE_SHARED_SECRET]
