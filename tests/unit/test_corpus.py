"""The resource sets of ``tests/corpus`` read by the config loader and clean for ``analyze``
(``tests/integration/test_corpus_envoy.py`` serves them to a real Envoy), and together
covering what the corpus is for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xdscore.analysis import analyze
from xdscore.config import load_directory, read_directory

from ..corpus import SETS, placeholders, render

COVERED = {
    # TLS transport sockets, downstream and upstream, and SDS secrets
    "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
    "envoy.extensions.transport_sockets.tls.v3.Secret",
    # HTTP filters
    "envoy.extensions.filters.http.cors.v3.Cors",
    "envoy.extensions.filters.http.fault.v3.HTTPFault",
    "envoy.extensions.filters.http.header_to_metadata.v3.Config",
    "envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
    "envoy.extensions.filters.http.buffer.v3.Buffer",
    "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
    "envoy.extensions.filters.http.lua.v3.Lua",
    "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
    "envoy.extensions.filters.http.ratelimit.v3.RateLimit",
    "envoy.extensions.filters.http.router.v3.Router",
    # TCP and UDP proxying, tracing
    "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    "envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig",
    "envoy.config.trace.v3.ZipkinConfig",
    "envoy.config.trace.v3.OpenTelemetryConfig",
}
FIELDS = (
    "weighted_clusters:", "retry_policy:", "safe_regex:", "request_mirror_policies:",
    "string_match:", "query_parameters:", "rate_limits:", "protocol: UDP",
)  # fmt: skip


def rendered(name: str, tmp_path: Path) -> Path:
    values = {
        key: tmp_path / "certs" if key == "CERTS" else 20000 + index
        for index, key in enumerate(sorted(placeholders(name)))
    }
    return render(name, tmp_path / name, values)


@pytest.mark.parametrize("name", SETS)
def test_the_set_loads_and_analyze_finds_nothing(name: str, tmp_path: Path) -> None:
    directory = rendered(name, tmp_path)
    snapshot = load_directory(directory)
    found, problems = read_directory(directory)
    assert not problems
    assert len(found) >= 3
    assert analyze(found).diagnostics == ()
    assert analyze(snapshot).diagnostics == ()


def test_the_corpus_covers_what_it_is_for() -> None:
    text = "\n".join(
        path.read_text()
        for name in SETS
        for path in (Path(__file__).parents[1] / "corpus" / name).iterdir()
    )
    types = set(re.findall(r"type\.googleapis\.com/([\w.]+)", text))
    assert types >= COVERED, COVERED - types
    assert [field for field in FIELDS if field not in text] == []
    assert len(SETS) >= 12
