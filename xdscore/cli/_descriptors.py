"""``--descriptors FILE`` of ``serve`` and ``analyze``: extension types brought as a
FileDescriptorSet."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import DescriptorSetError, register_descriptors

__all__ = ["add_argument", "register"]


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--descriptors FILE``."""
    parser.add_argument(
        "--descriptors",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a FileDescriptorSet (protoc --include_imports --descriptor_set_out=FILE, or "
        "buf build -o FILE) whose message types resources may hold, such as Envoy's contrib "
        "extensions; repeatable",
    )


def register(args: argparse.Namespace) -> str | None:
    """Register every ``--descriptors`` file; the reason one cannot be, or ``None``."""
    for path in args.descriptors:
        try:
            register_descriptors(path)
        except DescriptorSetError as exc:
            return f"--descriptors {exc}"
    return None
