"""``xdscore apply DIR --etcd URL``: write a config directory to etcd in one transaction."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import (
    DEFAULT_MAX_CONFIG_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_RELOAD_TIMEOUT,
    ConfigError,
    load_directory_async,
)
from ..etcd import DEFAULT_PREFIX, EtcdError, apply_state
from ._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, connect_etcd, directory_problem
from ._common import positive as _positive

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``apply`` and its flags."""
    apply = commands.add_parser(
        "apply",
        help="check a config directory as serve does and write it to etcd in one transaction",
        description="Load and check DIR exactly as `xdscore serve DIR` does (a directory "
        "serve would refuse is refused, with the same messages and exit status 1), then make "
        "it the whole state under the prefix in one etcd transaction: new and changed "
        "resources written, removed ones deleted, unchanged ones untouched. Prints each "
        "change (+ added, ~ changed, - removed) and the revision written. Every "
        "`xdscore serve --etcd` replica applies that revision whole. See docs/etcd.md.",
    )
    apply.add_argument("directory", type=Path, metavar="DIR")
    apply.add_argument(
        "--etcd", required=True, metavar="URL", help="the etcd endpoint, http://HOST:PORT"
    )
    apply.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"the key prefix the resources live under (default {DEFAULT_PREFIX})",
    )
    apply.add_argument("--dry-run", action="store_true", help="print the changes; write nothing")
    apply.add_argument(
        "--max-file-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_FILE_BYTES,
        metavar="BYTES",
        help=f"as for serve (default {DEFAULT_MAX_FILE_BYTES})",
    )
    apply.add_argument(
        "--max-config-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_CONFIG_BYTES,
        metavar="BYTES",
        help=f"as for serve (default {DEFAULT_MAX_CONFIG_BYTES})",
    )


async def run(args: argparse.Namespace) -> int:
    """Run ``apply``; the exit status (0 applied or nothing to do, 1 refused or etcd failed,
    2 bad arguments)."""
    directory: Path = args.directory
    missing = directory_problem(directory)
    if missing is not None:
        print(f"xdscore: cannot apply {directory}: {missing}", file=sys.stderr)
        return EXIT_USAGE
    try:
        snapshot = await load_directory_async(
            directory,
            timeout=DEFAULT_RELOAD_TIMEOUT,
            max_file_bytes=args.max_file_bytes,
            max_config_bytes=args.max_config_bytes,
        )
    except ConfigError as exc:
        print(f"xdscore: cannot apply {directory}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    client = connect_etcd(args.etcd, f"cannot apply {directory}")
    if isinstance(client, int):
        return client
    try:
        # The directory was checked by the loader, as serve checks it: not again here.
        result = await apply_state(
            client, snapshot, prefix=args.prefix, dry_run=args.dry_run, check=False
        )
    except (EtcdError, ValueError) as exc:
        print(f"xdscore: cannot apply {directory} to {args.etcd}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await client.close()
    for line in result.diff.lines():
        print(line)
    summary = result.diff.summary()
    if args.dry_run:
        print(f"dry run: {summary}; etcd is at revision {result.revision}; nothing written")
    elif result.written:
        print(f"applied {summary} under {args.prefix}: revision {result.revision}")
    else:
        print(f"no change under {args.prefix}: etcd is at revision {result.revision}")
    return EXIT_OK
