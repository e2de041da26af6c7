"""The etcd key layout, the difference an apply writes, and how a state is judged (pure)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xdscore import CLUSTER, ENDPOINT, ROUTE, make_resource
from xdscore.builders import eds_cluster, load_assignment, route_configuration
from xdscore.etcd import (
    LayoutError,
    diff,
    encode_state,
    evaluate,
    parse_key,
    parse_url,
    resource_key,
)
from xdscore.etcd._layout import marker_key, range_end, range_start

CLUSTER_KEY = b"/xdscore/envoy.config.cluster.v3.Cluster/web"


def test_one_key_per_resource_named_by_message_and_resource() -> None:
    assert resource_key("/xdscore", CLUSTER, "web") == CLUSTER_KEY
    assert resource_key("/xdscore/", CLUSTER, "web") == CLUSTER_KEY  # trailing slash dropped
    assert parse_key("/xdscore", CLUSTER_KEY) == (CLUSTER, "web")
    assert range_start("/xdscore") == b"/xdscore/"
    assert range_end("/xdscore") == b"/xdscore0"
    assert range_start("/xdscore") < CLUSTER_KEY < range_end("/xdscore")


def test_a_name_with_slashes_is_everything_after_the_type() -> None:
    name = "xdstp://authority/envoy.config.cluster.v3.Cluster/a/b"
    key = resource_key("/p", CLUSTER, name)
    assert key == b"/p/envoy.config.cluster.v3.Cluster/" + name.encode()
    assert parse_key("/p", key) == (CLUSTER, name)


def test_keys_outside_the_layout_are_refused_with_a_reason() -> None:
    with pytest.raises(LayoutError, match=r"unknown type 'no\.such\.Type'"):
        parse_key("/p", b"/p/no.such.Type/x")
    with pytest.raises(LayoutError, match="does not follow the layout"):
        parse_key("/p", b"/p/envoy.config.cluster.v3.Cluster")
    with pytest.raises(LayoutError, match="does not follow the layout"):
        parse_key("/p", b"/p/envoy.config.cluster.v3.Cluster/")
    assert parse_key("/p", marker_key("/p")) is None  # the reserved marker holds no resource
    with pytest.raises(ValueError, match="at least one character"):
        resource_key("/", CLUSTER, "x")


def test_the_value_is_the_deterministic_encoding_so_versions_agree() -> None:
    cluster = make_resource(eds_cluster("web"))
    state = encode_state("/p", [cluster])
    assert state == {b"/p/envoy.config.cluster.v3.Cluster/web": cluster.body}
    (read,) = evaluate("/p", state).resources
    assert (read.type_url, read.name, read.version) == (CLUSTER, "web", cluster.version)


def test_encode_refuses_duplicates_and_aliases() -> None:
    cluster = make_resource(eds_cluster("web"))
    with pytest.raises(ValueError, match="duplicate"):
        encode_state("/p", [cluster, cluster])
    aliased = make_resource(eds_cluster("web"), aliases=("other",))
    with pytest.raises(ValueError, match="aliases"):
        encode_state("/p", [aliased])


def test_the_diff_lists_added_changed_removed_and_ignores_the_marker() -> None:
    a, b, c = (make_resource(eds_cluster(name)) for name in "abc")
    b2 = make_resource(eds_cluster("b", connect_timeout=9.0))
    current = encode_state("/p", [a, b, c]) | {marker_key("/p"): b"{}"}
    ep = make_resource(load_assignment("a", [("10.0.0.1", 80)]))
    desired = encode_state("/p", [a, b2, ep])
    changes = diff("/p", current, desired)
    assert [str(change) for change in changes.added] == ["eds a"]
    assert [str(change) for change in changes.changed] == ["cds b"]
    assert [str(change) for change in changes.removed] == ["cds c"]
    assert (len(changes), changes.unchanged) == (3, 1)
    assert list(changes.lines()) == ["+ eds a", "~ cds b", "- cds c"]
    assert changes.summary() == "3 change(s): 1 added, 1 changed, 1 removed, 1 unchanged"
    assert not diff("/p", desired, desired)


def test_a_state_is_judged_as_a_config_directory_is() -> None:
    route = make_resource(route_configuration("r", [("/", "missing")]))
    judged = evaluate("/p", encode_state("/p", [route]))
    (problem,) = judged.problems
    assert problem.startswith("/p/envoy.config.route.v3.RouteConfiguration/r: XDS001 ")
    assert "'missing'" in problem
    # Bytes that are not the type, and a key of no known type, are problems too.
    bad = {resource_key("/p", ENDPOINT, "x"): b"\xff\xff", b"/p/nope.Nope/x": b""}
    problems = evaluate("/p", bad).problems
    assert any("XDS003" in problem for problem in problems), problems
    assert any("unknown type 'nope.Nope'" in problem for problem in problems), problems
    # A name that differs from the message's own is refused (XDS007).
    renamed = {resource_key("/p", ROUTE, "other"): route.body}
    assert any("XDS007" in problem for problem in evaluate("/p", renamed).problems)


def test_urls() -> None:
    assert parse_url("http://127.0.0.1:2379") == ("127.0.0.1", 2379)
    assert parse_url("localhost:12") == ("localhost", 12)
    assert parse_url("http://etcd") == ("etcd", 2379)
    with pytest.raises(ValueError, match="TLS"):
        parse_url("https://etcd:2379")
    with pytest.raises(ValueError, match="expected an etcd URL"):
        parse_url("ftp://etcd:1")


def test_without_aetcd_the_package_imports_and_the_error_names_the_extra() -> None:
    probe = (
        "import sys; sys.modules['aetcd'] = None\n"  # as if aetcd were not installed
        "import xdscore.etcd as e\n"
        "try:\n"
        "    e.connect('http://127.0.0.1:2379')\n"
        "except e.EtcdError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    assert "pip install 'xdscore[etcd]'" in out
