"""Virtual-host aliases in the config directory: an ``envoy.service.discovery.v3.Resource``
entry wraps a resource and gives it ``aliases`` (docs/config-server.md, file formats)."""

from __future__ import annotations

from pathlib import Path

from xdscore import VIRTUAL_HOST
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


def test_wrapper_version_and_ttl_are_refused(tmp_path: Path) -> None:
    text = entry("route_0/a", ["route_0/a.example"], extra='  version: "3"\n  ttl: 5s\n')
    assert any("'version', 'ttl' cannot be given here" in p for p in problems(tmp_path, text))


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
