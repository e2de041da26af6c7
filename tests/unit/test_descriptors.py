"""Extension types brought as a FileDescriptorSet (``--descriptors FILE``, or
``xdscore.config.register_descriptors``): loadable, checked, served and round-tripped."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from google.protobuf import descriptor_pb2
from validate import validate_pb2

from xdscore.analysis import FIELD_CONSTRAINT, analyze
from xdscore.cli import main
from xdscore.config import DescriptorSetError, read_directory, register_descriptors
from xdscore.wire._messages import message_class

PACKAGE = "xdscoretests.greeting.v1"
TYPE_URL = f"type.googleapis.com/{PACKAGE}.Greeting"
FIELD = descriptor_pb2.FieldDescriptorProto


def descriptor_set() -> bytes:
    """What ``protoc --descriptor_set_out`` writes for two small files, the second importing
    the first and validate.proto (listed in reverse order, as a set may list them)::

        // xdscore_tests/mode.proto
        enum Mode { QUIET = 0; LOUD = 1; }
        // xdscore_tests/greeting.proto
        message Greeting {
          string text = 1 [(validate.rules).string.min_len = 1];
          Mode mode = 2;
          repeated Greeting replies = 3;
        }
    """
    mode = descriptor_pb2.FileDescriptorProto(
        name="xdscore_tests/mode.proto", package=PACKAGE, syntax="proto3"
    )
    enum = mode.enum_type.add(name="Mode")
    enum.value.add(name="QUIET", number=0)
    enum.value.add(name="LOUD", number=1)
    greeting = descriptor_pb2.FileDescriptorProto(
        name="xdscore_tests/greeting.proto",
        package=PACKAGE,
        syntax="proto3",
        dependency=["validate/validate.proto", "xdscore_tests/mode.proto"],
    )
    message = greeting.message_type.add(name="Greeting")
    text = message.field.add(
        name="text", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL, json_name="text"
    )
    text.options.Extensions[validate_pb2.rules].string.min_len = 1
    message.field.add(
        name="mode", number=2, type=FIELD.TYPE_ENUM, label=FIELD.LABEL_OPTIONAL,
        type_name=f".{PACKAGE}.Mode", json_name="mode",
    )  # fmt: skip
    message.field.add(
        name="replies", number=3, type=FIELD.TYPE_MESSAGE, label=FIELD.LABEL_REPEATED,
        type_name=f".{PACKAGE}.Greeting", json_name="replies",
    )  # fmt: skip
    return descriptor_pb2.FileDescriptorSet(file=[greeting, mode]).SerializeToString()


def cluster_yaml(type_url: str, text: str = "hi") -> str:
    return (
        '"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster\n'
        "name: c\ntype: STATIC\nconnect_timeout: 1s\n"
        "transport_socket:\n  name: envoy.transport_sockets.greeting\n"
        f"  typed_config: {{'@type': {type_url}, text: {text!r}, mode: loud,\n"
        "                 replies: {text: again}}\n"
    )


@pytest.fixture(scope="module")
def descriptors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("descriptors") / "greeting.pb"
    path.write_bytes(descriptor_set())
    return path


def test_an_unknown_extension_type_points_at_descriptors(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(cluster_yaml("type.googleapis.com/xdscoretests.never.v1.X"))
    [problem] = read_directory(tmp_path)[1]
    assert problem.field == "transport_socket.typed_config"
    assert "--descriptors FILE" in problem.message


def test_registered_types_load_check_and_round_trip(tmp_path: Path, descriptors: Path) -> None:
    names = register_descriptors(descriptors)
    assert f"{PACKAGE}.Greeting" in names or message_class(TYPE_URL)  # once per process
    assert register_descriptors(descriptor_set()) == []  # the same files again: nothing new
    (tmp_path / "c.yaml").write_text(cluster_yaml(TYPE_URL))
    found, problems = read_directory(tmp_path)
    assert problems == []
    [(_, resource)] = found
    cluster = cluster_pb2.Cluster.FromString(resource.body)
    greeting = message_class(TYPE_URL).FromString(cluster.transport_socket.typed_config.value)
    assert (greeting.text, greeting.mode, greeting.replies[0].text) == ("hi", 1, "again")
    assert not analyze(found).has_errors

    # The extension's own validate.rules are checked too.
    (tmp_path / "c.yaml").write_text(cluster_yaml(TYPE_URL, text=""))
    found, _ = read_directory(tmp_path)
    [violation] = [d for d in analyze(found) if d.code == FIELD_CONSTRAINT]
    assert violation.field == "transport_socket.typed_config.text"


def test_analyze_takes_descriptors(tmp_path: Path, descriptors: Path) -> None:
    (tmp_path / "c.yaml").write_text(cluster_yaml(TYPE_URL))
    assert main(["analyze", str(tmp_path), "--descriptors", str(descriptors)]) == 0
    assert main(["analyze", str(tmp_path), "--descriptors", str(tmp_path / "none.pb")]) == 2
    (tmp_path / "junk.pb").write_bytes(b"\xff\xff not a descriptor set")
    assert main(["analyze", str(tmp_path), "--descriptors", str(tmp_path / "junk.pb")]) == 2


def test_a_descriptor_set_with_a_missing_import_is_refused() -> None:
    orphan = descriptor_pb2.FileDescriptorProto(
        name="xdscore_tests/orphan.proto", package="xdscoretests.orphan", syntax="proto3",
        dependency=["not/there.proto"],
    )  # fmt: skip
    with pytest.raises(DescriptorSetError, match=r"imports not/there.proto.*--include_imports"):
        register_descriptors(descriptor_pb2.FileDescriptorSet(file=[orphan]).SerializeToString())


def test_serve_with_descriptors_serves_the_extension(tmp_path: Path, descriptors: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "c.yaml").write_text(cluster_yaml(TYPE_URL))
    base = [sys.executable, "-m", "xdscore", "serve", str(config), "--listen", "127.0.0.1:0"]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1
    assert "--descriptors" in refused.stderr
    command = [*base, "--debounce-ms", "0", "--admin", "127.0.0.1:0",
               "--descriptors", str(descriptors)]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            assert p.stdout is not None
            lines = [p.stdout.readline(), p.stdout.readline()]
            assert "cds=1" in "".join(lines), lines
            admin = next(line for line in lines if "admin endpoint" in line).split()[-1]
            with urllib.request.urlopen(f"{admin}config_dump?node=n", timeout=10) as reply:
                dump = json.load(reply)
        finally:
            p.terminate()
            p.wait(timeout=10)
    text = json.dumps(dump)
    assert TYPE_URL in text
    assert '"text": "hi"' in text
    assert '"mode": "LOUD"' in text
