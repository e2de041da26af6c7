"""The ``envoy.service.discovery.v3.Resource`` wrapper entry of the config directory: it wraps
a resource and gives it ``aliases`` (virtual hosts) and a ``ttl`` (docs/config-server.md,
file formats)."""

from __future__ import annotations

from pathlib import Path

from xdscore import CLUSTER, VIRTUAL_HOST
from xdscore.config import load_directory, read_directory

WRAPPER = "type.googleapis.com/envoy.service.discovery.v3.Resource"
VHOST = "type.googleapis.com/envoy.config.route.v3.VirtualHost"


def entry(name: str, aliases: list[str], *, extra: str = "", inner: str = VHOST) -> str:
    domains = f"    domains: [{name.rpartition('/')[2]}.example]\n" if inner == VHOST else ""
    return (
        f'- "@type": {WRAPPER}\n'
        f"  aliases: [{', '.join(aliases)}]\n"
        f"{extra}"
        f"  resource:\n"
        f'    "@type": {inner}\n'
        f"    name: {name}\n"
        f"{domains}"
    )


def problems(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "hosts.yaml").write_text(text)
    return [problem.message for problem in read_directory(tmp_path)[1]]


def test_wrapped_virtual_host_gets_its_aliases(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(
        entry("route_0/a", ["route_0/a.example", "route_0/www.a.example"])
        + f'- "@type": {VHOST}\n  name: route_0/b\n  domains: [b.example]\n'
    )
    snapshot = load_directory(tmp_path)
    hosts = snapshot.resources(VIRTUAL_HOST)
    assert hosts is not None
    assert hosts["route_0/a"].aliases == ("route_0/a.example", "route_0/www.a.example")
    assert hosts["route_0/b"].aliases == ()


def test_wrapper_name_must_be_the_resource_name(tmp_path: Path) -> None:
    text = entry("route_0/a", ["route_0/a.example"], extra="  name: other\n")
    assert any("'name' 'other' is not the name" in p for p in problems(tmp_path, text))


def test_wrapper_version_is_refused(tmp_path: Path) -> None:
    text = entry("route_0/a", ["route_0/a.example"], extra='  version: "3"\n  ttl: 5s\n')
    found = problems(tmp_path, text)
    assert any("'version' cannot be given here" in p for p in found), found
    assert not any("'ttl'" in p.split("(")[0] for p in found), found


def test_wrapper_ttl_gives_the_resource_its_ttl(tmp_path: Path) -> None:
    cluster = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    (tmp_path / "ttl.yaml").write_text(
        f'- "@type": {WRAPPER}\n  ttl: 2.5s\n  resource:\n    "@type": {cluster}\n    name: c\n'
        f'- "@type": {cluster}\n  name: d\n'
    )
    snapshot = load_directory(tmp_path)
    clusters = snapshot.resources(CLUSTER)
    assert clusters is not None
    assert clusters["c"].ttl == 2.5
    assert clusters["d"].ttl is None
    # The TTL is part of the version: the same cluster without it has another.
    (tmp_path / "ttl.yaml").write_text(f'- "@type": {cluster}\n  name: c\n')
    plain = load_directory(tmp_path).resources(CLUSTER)
    assert plain is not None
    assert plain["c"].body == clusters["c"].body
    assert plain["c"].version != clusters["c"].version


def test_wrapper_ttl_must_be_positive(tmp_path: Path) -> None:
    text = entry("route_0/a", ["route_0/a.example"], extra="  ttl: 0s\n")
    assert any("'ttl' must be positive, not 0 s" in p for p in problems(tmp_path, text))


def test_wrapper_without_a_resource_is_refused(tmp_path: Path) -> None:
    text = f'- "@type": {WRAPPER}\n  aliases: [route_0/a.example]\n'
    assert any("without its 'resource'" in p for p in problems(tmp_path, text))


def test_aliases_only_for_virtual_hosts(tmp_path: Path) -> None:
    text = entry("c", ["x"], inner="type.googleapis.com/envoy.config.cluster.v3.Cluster")
    assert any("aliases are only for virtual hosts" in p for p in problems(tmp_path, text))


def test_an_alias_names_one_resource(tmp_path: Path) -> None:
    text = (
        entry("route_0/a", ["route_0/a.example"])
        + entry("route_0/c", ["route_0/a.example"])
        + entry("route_0/d", ["route_0/a"])
        + entry("route_0/e", ["route_0/x", "route_0/x"])
    )
    found = problems(tmp_path, text)
    assert any("'route_0/a.example' of 'route_0/c' is also one of 'route_0/a'" in p for p in found)
    assert any("'route_0/a' of 'route_0/d' is another resource's name" in p for p in found)
    assert any("an alias is given twice" in p for p in found)
