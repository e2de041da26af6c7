"""The reloader's parts in process: what a reload serves file by file, which files a writer
still holds, the loader process being killed, and the watcher's first load and waits."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from xdscore import CLUSTER
from xdscore.cache import Snapshot, SnapshotCache, same_for_all
from xdscore.config import ConfigError, _process, watch_directory
from xdscore.config._assemble import assemble
from xdscore.config._loader import read_files
from xdscore.config._process import LoaderFailed, load_in_process, warm_loader
from xdscore.config._writers import WriteTracker

from ..factories import wait_until

CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


def cluster(name: str, timeout: str = "1s") -> str:
    return (
        f'- {{"@type": {CLUSTER_TYPE}, name: {name}, type: STATIC, connect_timeout: {timeout}}}\n'
    )


def route(name: str, target: str) -> str:
    return (
        f'- {{"@type": {ROUTE_TYPE}, name: {name}, virtual_hosts: [{{name: v, domains: ["*"], '
        f"routes: [{{match: {{prefix: /}}, route: {{cluster: {target}}}}}]}}]}}\n"
    )


def names(resources: object) -> set[str]:
    return {resource.name for resource in resources}  # type: ignore[attr-defined]


# -- file by file --------------------------------------------------------------------------


def test_a_file_refused_alone_keeps_its_last_good_version(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(cluster("a1"))
    (tmp_path / "b.yaml").write_text(cluster("b1"))
    good = {path: path.read_bytes() for path in tmp_path.iterdir()}
    (tmp_path / "a.yaml").write_text(cluster("a2") + "- [unclosed\n")
    (tmp_path / "b.yaml").write_text(cluster("b2"))
    (tmp_path / "new.yaml").write_text("{not: a resource}\n")

    assembly = assemble(read_files(tmp_path), good)

    assert names(assembly.resources) == {"a1", "b2"}  # a.yaml as it was; new.yaml left out
    refused = {refusal.path.name: refusal for refusal in assembly.refused}
    assert set(refused) == {"a.yaml", "new.yaml"}
    assert refused["a.yaml"].kept
    assert not refused["new.yaml"].kept
    assert "cannot be read" in str(refused["a.yaml"].problems[0])
    # The whole policy refuses the same files outright.
    with pytest.raises(ConfigError, match="cannot be read"):
        assemble(read_files(tmp_path))


def test_a_resource_wrong_by_itself_refuses_its_file_alone(tmp_path: Path) -> None:
    # A negative duration breaks a constraint of Envoy's API (XDS013): that file's own fault.
    (tmp_path / "a.yaml").write_text(cluster("a1"))
    (tmp_path / "b.yaml").write_text(cluster("b1"))
    good = {path: path.read_bytes() for path in tmp_path.iterdir()}
    (tmp_path / "a.yaml").write_text(cluster("a2", timeout="-1s"))
    (tmp_path / "b.yaml").write_text(cluster("b2"))

    assembly = assemble(read_files(tmp_path), good)

    assert names(assembly.resources) == {"a1", "b2"}
    (refusal,) = assembly.refused
    assert refusal.path.name == "a.yaml"
    assert "XDS013" in str(refusal.problems[0])


def test_problems_between_files_refuse_the_whole_reload(tmp_path: Path) -> None:
    (tmp_path / "clusters.yaml").write_text(cluster("backend"))
    (tmp_path / "routes.yaml").write_text(route("r", "backend"))
    good = {path: path.read_bytes() for path in tmp_path.iterdir()}
    (tmp_path / "clusters.yaml").write_text(cluster("renamed"))  # routes.yaml now dangles
    (tmp_path / "broken.yaml").write_text("- [unclosed\n")

    with pytest.raises(ConfigError) as refused:
        assemble(read_files(tmp_path), good)
    text = str(refused.value)
    assert "XDS001" in text  # the dangling reference
    assert "broken.yaml: cannot be read" in text  # and the file refused alone, listed too


def test_nothing_left_to_serve_is_refused(tmp_path: Path) -> None:
    (tmp_path / "only.yaml").write_text("- [unclosed\n")
    with pytest.raises(ConfigError, match="holds no resources"):
        assemble(read_files(tmp_path), {})


def test_an_oversized_file_is_refused_alone(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(cluster("a1"))
    (tmp_path / "huge.yaml").write_text("# " + "x" * 2000 + "\n")
    assembly = assemble(read_files(tmp_path, max_file_bytes=1000), {})
    assert names(assembly.resources) == {"a1"}
    (refusal,) = assembly.refused
    assert "(raise it with --max-file-bytes, or max_file_bytes=)" in str(refusal.problems[0])


# -- writers -------------------------------------------------------------------------------


@pytest.fixture
def tracker(tmp_path: Path) -> WriteTracker:
    tracker = WriteTracker.open(tmp_path)
    if tracker is None:
        pytest.skip("inotify is Linux's")
    return tracker


def test_a_file_is_held_from_its_first_write_to_its_close(
    tmp_path: Path, tracker: WriteTracker
) -> None:
    path = tmp_path / "a.yaml"
    with path.open("w") as stream:
        assert tracker.held([path]) == set()  # opened, nothing written: nothing to wait for
        stream.write("half")
        stream.flush()
        assert tracker.held([path]) == {path}
        assert tracker.closed() == []
    assert tracker.held([path]) == set()
    assert tracker.closed() == [path]
    # Read only, or written and deleted: not held.
    path.read_text()
    with path.open("a") as stream:
        stream.write("more")
        stream.flush()
        path.unlink()
        assert tracker.held([path]) == set()
    tracker.close()


def test_a_file_reached_by_a_link_is_held_by_its_target(
    tmp_path: Path, tracker: WriteTracker, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "real.yaml"
    target.write_text("")
    link = tmp_path / "linked.yaml"
    link.symlink_to(target)
    assert tracker.held([link]) == set()  # from now on its real directory is watched
    with target.open("a") as stream:
        stream.write("x")
        stream.flush()
        assert tracker.held([link]) == {link}
    assert tracker.held([link]) == set()
    tracker.close()


def test_a_new_directory_is_watched(tmp_path: Path, tracker: WriteTracker) -> None:
    (tmp_path / "sub").mkdir()
    assert tracker.closed() == []  # takes in the directory's creation: watched from now on
    path = tmp_path / "sub" / "a.yaml"
    with path.open("w") as stream:
        stream.write("x")
        stream.flush()
        assert tracker.held([path]) == {path}
    tracker.close()


# -- the loader process --------------------------------------------------------------------


def loader_children() -> list[int]:
    """The pids of the loads running now (the children of the fork server)."""
    (server,) = _process._servers
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if parent == server.process.pid:
                children.append(int(entry.name))
    return children


def slow_directory(directory: Path) -> Path:
    numbers = ", ".join(["0"] * 1_000_000)  # several seconds of parsing
    (directory / "slow.yaml").write_text(
        f'"@type": {CLUSTER_TYPE}\nname: slow\ntype: STATIC\nconnect_timeout: 1s\n'
        f"metadata: {{filter_metadata: {{x: {{values: [{numbers}]}}}}}}\n"
    )
    return directory


@pytest.mark.anyio
async def test_cancelling_a_load_kills_its_process(tmp_path: Path) -> None:
    await warm_loader()
    contents = read_files(slow_directory(tmp_path))
    with anyio.move_on_after(0.5) as scope:
        await load_in_process(contents, None)
    assert scope.cancelled_caught
    await wait_until(lambda: not loader_children(), timeout=2, what="the load's process gone")


@pytest.mark.anyio
async def test_a_load_whose_process_dies_fails_saying_how(tmp_path: Path) -> None:
    await warm_loader()
    contents = read_files(slow_directory(tmp_path))

    async def kill_it() -> None:
        await wait_until(lambda: bool(loader_children()), timeout=5, what="the load's process")
        (child,) = loader_children()
        os.kill(child, 9)

    async with anyio.create_task_group() as group:
        group.start_soon(kill_it)
        with pytest.raises(LoaderFailed, match="ended without an answer"):
            await load_in_process(contents, None)


# -- the watcher ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_first_load_is_what_start_returns_or_raises(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(cluster("a1"))
    cache = SnapshotCache(group=same_for_all)
    async with anyio.create_task_group() as group:
        snapshot: Snapshot = await group.start(watch_directory, tmp_path, cache)
        assert names(snapshot) == {"a1"}
        assert cache.snapshot(None) is snapshot
        group.cancel_scope.cancel()
    (tmp_path / "b.yaml").write_text("- [unclosed\n")
    async with anyio.create_task_group() as group:
        with pytest.raises(ConfigError, match=r"b\.yaml: cannot be read"):
            await group.start(watch_directory, tmp_path, SnapshotCache(group=same_for_all))


@pytest.mark.anyio
async def test_a_change_waits_for_its_writer_to_close_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if WriteTracker.open(tmp_path) is None:
        pytest.skip("inotify is Linux's")
    (tmp_path / "a.yaml").write_text(cluster("a1"))
    cache = SnapshotCache(group=same_for_all)
    applied: list[Snapshot] = []
    caplog.set_level(logging.INFO, logger="xdscore.config")
    watch: Callable[..., object] = watch_directory
    async with anyio.create_task_group() as group:
        await group.start(
            lambda task_status: watch(
                tmp_path, cache, quiet_ms=50, max_delay_ms=10_000, on_applied=applied.append,
                task_status=task_status,
            )
        )  # fmt: skip
        with (tmp_path / "a.yaml").open("w") as stream:
            stream.write(cluster("b1"))  # a whole file, and still open: not yet read
            stream.flush()
            await anyio.sleep(1)
            assert applied == []
            assert "reload #1" not in caplog.text
            stream.write(cluster("b2"))
        await wait_until(lambda: bool(applied), timeout=5, what="the file applied once closed")
        assert names(applied[0]) == {"b1", "b2"}
        group.cancel_scope.cancel()
    assert all(resource.type_url == CLUSTER for resource in applied[0])


@pytest.mark.anyio
async def test_a_reload_that_changes_no_resource_still_reports_it(tmp_path: Path) -> None:
    # xdscore serve reads scopes.yaml again in on_applied: a change to it alone must reach it.
    (tmp_path / "a.yaml").write_text(cluster("a1"))
    cache = SnapshotCache(group=same_for_all)
    applied: list[Snapshot] = []
    watch: Callable[..., object] = watch_directory
    async with anyio.create_task_group() as group:
        first = await group.start(
            lambda task_status: watch(
                tmp_path, cache, quiet_ms=50, on_applied=applied.append, task_status=task_status
            )
        )
        (tmp_path / "scopes.yaml").write_text("scopes: []\n")
        await wait_until(lambda: bool(applied), timeout=5, what="on_applied")
        assert applied == [first]  # the same snapshot, still served
        assert cache.snapshot(None) is first
        group.cancel_scope.cancel()
