"""LEDS endpoints in the config directory: an ``LbEndpoint`` has no name field, so it is
named by the ``envoy.service.discovery.v3.Resource`` entry that wraps it."""

from __future__ import annotations

from pathlib import Path

from xdscore import LBENDPOINT
from xdscore.config import load_directory, read_directory
from xdscore.wire._messages import decode_resource

WRAPPER = "type.googleapis.com/envoy.service.discovery.v3.Resource"
LB_ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint"
NAME = "xdstp://xdscore.test/envoy.config.endpoint.v3.LbEndpoint/web/local/ep1"


def endpoint(port: int, *, name: str | None = NAME, wrapped: bool = True) -> str:
    body = (
        f'  "@type": {LB_ENDPOINT}\n'
        f"  endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}\n"
    )
    if not wrapped:
        return "- " + body[2:]
    named = f'  name: "{name}"\n' if name is not None else ""
    return f'- "@type": {WRAPPER}\n{named}  resource:\n' + "".join(
        "  " + line + "\n" for line in body.splitlines()
    )


def problems(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "endpoints.yaml").write_text(text)
    return [problem.message for problem in read_directory(tmp_path)[1]]


def test_wrapped_lb_endpoint_takes_the_wrapper_name(tmp_path: Path) -> None:
    other = NAME.replace("ep1", "ep2?zone=z1&app=web")
    (tmp_path / "endpoints.yaml").write_text(endpoint(8080) + endpoint(8081, name=other))
    served = load_directory(tmp_path).resources(LBENDPOINT)
    assert served is not None
    # Names are canonical: the context parameters sorted.
    assert sorted(served) == [NAME, NAME.replace("ep1", "ep2?app=web&zone=z1")]
    lb_endpoint = decode_resource(LBENDPOINT, served[NAME].body)
    assert lb_endpoint.endpoint.address.socket_address.port_value == 8080  # type: ignore[attr-defined]


def test_wrapped_lb_endpoint_without_a_name_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, endpoint(8080, name=None))
    assert any(
        "leds resources have no name of their own; give the wrapper's 'name'" in p for p in found
    ), found


def test_bare_lb_endpoint_is_refused_with_the_way_to_name_it(tmp_path: Path) -> None:
    found = problems(tmp_path, endpoint(8080, wrapped=False))
    assert any(
        "leds resources have no name of their own: wrap it in an "
        "envoy.service.discovery.v3.Resource entry" in p
        for p in found
    ), found
