"""Generate the type stubs shipped for the Envoy protobuf modules xdscore's API uses.

xds-protos ships its generated ``*_pb2`` modules without type information, so a type
checker sees every message as ``Any``. This writes mypy-protobuf stubs (``.pyi``) for the
modules the builders return and the transitive closure of what they import, as PEP 561
stub packages (``envoy-stubs``, ``xds-stubs``, ``udpa-stubs``, ``validate-stubs``, each
marked partial) that the xdscore wheel installs beside it. The descriptors come from the
installed modules themselves, so the stubs match the xds-protos version installed.

Run it with mypy-protobuf installed (it is in the dev extra): ``python stubs/generate.py``.
tests/unit/test_typing.py checks that the committed stubs are what it writes.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

from google.protobuf import descriptor as d
from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2

HERE = Path(__file__).resolve().parent
ROOTS = (
    "envoy.config.cluster.v3.cluster_pb2",
    "envoy.config.core.v3.address_pb2",
    "envoy.config.core.v3.base_pb2",
    "envoy.config.core.v3.config_source_pb2",
    "envoy.config.endpoint.v3.endpoint_pb2",
    "envoy.config.endpoint.v3.endpoint_components_pb2",
    "envoy.config.listener.v3.api_listener_pb2",
    "envoy.config.listener.v3.listener_components_pb2",
    "envoy.config.listener.v3.listener_pb2",
    "envoy.config.route.v3.route_components_pb2",
    "envoy.config.route.v3.route_pb2",
    "envoy.extensions.filters.http.router.v3.router_pb2",
    "envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2",
    "envoy.extensions.upstreams.http.v3.http_protocol_options_pb2",
)
"""The modules whose messages xdscore.builders takes or returns."""
PACKAGES = ("envoy", "xds", "udpa", "validate")
"""Top-level packages stubbed here; google.protobuf's come from types-protobuf."""


def closure(roots: tuple[str, ...]) -> dict[str, d.FileDescriptor]:
    """Every .proto file the root modules are built from, by name, dependencies first."""
    seen: dict[str, d.FileDescriptor] = {}

    def walk(file: d.FileDescriptor) -> None:
        if file.name in seen:
            return
        for dependency in file.dependencies:
            walk(dependency)
        seen[file.name] = file

    for name in roots:
        walk(importlib.import_module(name).DESCRIPTOR)
    return seen


def generate(target: Path) -> list[Path]:
    """Write the stub packages under ``target``; the files written."""
    from mypy_protobuf.main import Descriptors, generate_mypy_stubs

    files = closure(ROOTS)
    request = plugin_pb2.CodeGeneratorRequest()
    for file in files.values():
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        request.proto_file.append(proto)
        if file.name.split("/")[0] in PACKAGES:
            request.file_to_generate.append(file.name)
    response = plugin_pb2.CodeGeneratorResponse()
    generate_mypy_stubs(Descriptors(request), response, True, False, False, False, False)
    written = []
    for package in PACKAGES:
        shutil.rmtree(target / f"{package}-stubs", ignore_errors=True)
    for output in response.file:
        package, _, rest = output.name.partition("/")
        path = target / f"{package}-stubs" / rest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(output.content)
        written.append(path)
    for package in PACKAGES:
        root = target / f"{package}-stubs"
        # Partial: modules not stubbed here are looked up in the installed package.
        (root / "py.typed").write_text("partial\n")
        written.append(root / "py.typed")
        for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            init = directory / "__init__.pyi"
            if not init.exists():
                init.write_text("")
                written.append(init)
    return sorted(written)


if __name__ == "__main__":
    paths = generate(HERE)
    print(f"wrote {len(paths)} files under {HERE}", file=sys.stderr)
