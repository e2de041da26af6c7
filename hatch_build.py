"""xdscore's wheel, compiled with mypyc where this machine can build Python extensions.

hatchling runs :class:`CompiledWheel` for every wheel it builds: ``pip install .``, ``pip
install`` of the sdist, ``python -m build`` (pyproject.toml,
``[tool.hatch.build.targets.wheel.hooks.custom]``). It compiles the modules listed under
``[tool.xdscore] compiled`` with mypyc, through the same calls as mypy's own setup.py
(``mypycify``, then setuptools' ``build_ext``), into extension modules that the wheel holds
beside their sources (a platform wheel), with ``xdscore/_build.json`` naming them. It
builds the wheel of sources alone (for any Python 3.11+), saying why in one line:

* when ``XDSCORE_PURE=1`` is set;
* when the interpreter is not CPython, or no C compiler here can build a Python extension
  (none installed, or no Python headers);
* when the compile fails.

With ``XDSCORE_COMPILED=1`` set (and not ``XDSCORE_PURE=1``), the build fails instead of
falling back.

An editable install holds the sources only. Run as a script (``make compiled``), this
file builds the sdist and the compiled wheel from it, puts the wheel's extension modules
beside their sources in the clone, and compiles the tools listed under ``compiled-tools``
in place.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent
PURE = "XDSCORE_PURE"
REQUIRED = "XDSCORE_COMPILED"
RECORD = "xdscore/_build.json"  # read by xdscore._build


def settings(root: Path = ROOT) -> dict[str, list[str]]:
    """``[tool.xdscore]``: the modules to compile (``compiled``) and the tools
    (``compiled-tools``), as paths from the root."""
    with (root / "pyproject.toml").open("rb") as file:
        found: dict[str, list[str]] = tomllib.load(file)["tool"]["xdscore"]
    return found


def why_pure() -> str | None:
    """Why the wheel must hold the sources alone, or None if it can be compiled."""
    if os.environ.get(PURE) == "1":
        return f"{PURE}=1 is set"
    if platform.python_implementation() != "CPython":
        return f"mypyc compiles for CPython, and this is {platform.python_implementation()}"
    return compiler_problem()


def compiler_problem() -> str | None:
    """Why no C compiler here can build a Python extension, or None if one can: the
    compiler setuptools would use compiles a file that includes Python.h."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError
    from setuptools._distutils.sysconfig import customize_compiler

    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch, "probe.c")
        source.write_text("#include <Python.h>\nint probe(void) { return PY_MAJOR_VERSION; }\n")
        compiler = new_compiler()
        customize_compiler(compiler)
        include = sysconfig.get_paths()["include"]
        with _output_to(Path(scratch, "output")) as output:
            try:
                compiler.compile([str(source)], output_dir=scratch, include_dirs=[include])
            except (CCompilerError, DistutilsError, OSError) as exc:
                said = [line for line in output.read_text().splitlines() if "error" in line]
                detail = said[0].strip() if said else str(exc)
                return f"no C compiler here can build a Python extension ({detail})"
    return None


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[Path]:
    """Send this process's stdout and stderr (and its children's) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with path.open("w") as file:
            os.dup2(file.fileno(), 1)
            os.dup2(file.fileno(), 2)
            yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


def compile_modules(sources: list[str], *, cwd: Path, build: Path, in_place: bool) -> list[Path]:
    """Compile ``sources`` (paths from ``cwd``) with mypyc (several: one shared library and
    a small extension module for each); return the files built under ``build/lib``, which
    are also copied beside their sources when ``in_place``. Raises (or exits) on a type
    error or a failed C compile. ``MYPYC_OPT_LEVEL`` and ``MYPYC_DEBUG_LEVEL`` apply, as for
    the ``mypyc`` command."""
    from mypyc.build import mypycify
    from setuptools.dist import Distribution

    lib = build / "lib"
    with contextlib.chdir(cwd):
        extensions = mypycify(
            [*sources, f"--cache-dir={build / 'mypy-cache'}"],
            target_dir=str(build / "c"),
            opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"),
            debug_level=os.environ.get("MYPYC_DEBUG_LEVEL", "1"),
        )
        distribution = Distribution({"name": "xdscore", "ext_modules": extensions})
        command: Any = distribution.get_command_obj("build_ext")
        command.inplace = in_place
        command.build_lib = str(lib)
        command.build_temp = str(build / "temp")
        distribution.run_command("build_ext")
    return sorted(path for path in lib.rglob("*") if path.name.endswith(tuple(EXTENSION_SUFFIXES)))


def module_name(path: str) -> str:
    """``xdscore/wire/_codec.py`` -> ``xdscore.wire._codec``, as xdscore._build names them
    (the build does not import the package it builds)."""
    return path.removesuffix(".py").replace("/", ".")


class CompiledWheel(BuildHookInterface[BuilderConfig]):
    """The wheel target's build hook: compile, or say why the wheel holds sources alone."""

    def dependencies(self) -> list[str]:
        """What the compile needs besides hatchling and setuptools: mypy (pinned in
        ``compile-requires``) and xdscore's own dependencies, against which mypy checks the
        code it compiles; nothing for a wheel of sources."""
        if why_pure() is not None:
            return []
        return [*self.config.get("compile-requires", []), *self.metadata.core.dependencies]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._scratch: Path | None = None
        if version == "editable":  # the clone's sources; see `make compiled`
            return
        reason = why_pure() or self._compile(build_data)
        if reason and os.environ.get(REQUIRED) == "1" and os.environ.get(PURE) != "1":
            message = f"xdscore: {REQUIRED}=1 is set, and {reason}"
            raise RuntimeError(message)
        if reason:
            self.app.display_warning(f"xdscore: building the pure-Python wheel: {reason}")

    def _compile(self, build_data: dict[str, Any]) -> str | None:
        """Compile into a scratch directory and add what was built to the wheel; why not,
        if the compile failed."""
        self._scratch = Path(tempfile.mkdtemp(prefix="xdscore-mypyc-"))
        sources = settings(Path(self.root))["compiled"]
        started = time.monotonic()
        try:
            built = compile_modules(
                sources, cwd=Path(self.root), build=self._scratch, in_place=False
            )
        except (Exception, SystemExit) as exc:
            if os.environ.get(REQUIRED) == "1":
                raise
            said = str(exc) if str(exc) not in ("", "1") else "mypy's errors are above"
            return f"the mypyc compile failed ({type(exc).__name__}: {said})"
        lib = self._scratch / "lib"
        names = {path.relative_to(lib).as_posix().split(".")[0] for path in built}
        missing = [path for path in sources if path.removesuffix(".py") not in names]
        if missing:
            message = f"mypyc built no extension module for {', '.join(missing)}"
            raise RuntimeError(message)
        mypy = importlib.metadata.version("mypy")
        record = self._scratch / "_build.json"
        modules = [module_name(path) for path in sources]
        record.write_text(json.dumps({"compiled": modules, "compiler": f"mypyc (mypy {mypy})"}))
        build_data["force_include"][str(record)] = RECORD
        for path in built:
            build_data["force_include"][str(path)] = path.relative_to(lib).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        took = time.monotonic() - started
        self.app.display_info(
            f"xdscore: compiled {len(sources)} modules with mypyc (mypy {mypy}) in {took:.0f} s"
        )
        return None

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def main() -> None:
    """``make compiled``: the sdist and the compiled wheel from it, built as a user's install
    builds them (``python -m build``, ``XDSCORE_COMPILED=1``) into build/dist, where
    tests/integration/test_core_install.py finds them; the wheel's extension modules put
    beside their sources; then each tool compiled in place, in its own directory."""
    dist = ROOT / "build" / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    environment = {name: value for name, value in os.environ.items() if name != PURE}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        env={**environment, REQUIRED: "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    said = built.stdout + built.stderr
    print(said)
    if built.returncode:
        sys.exit(f"python -m build failed with status {built.returncode}")
    (dist / "build.log").write_text(said)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(tuple(EXTENSION_SUFFIXES)):
                archive.extract(name, ROOT)
    for tool in settings()["compiled-tools"]:
        path = ROOT / tool
        scratch = ROOT / "build" / "mypyc-tools" / path.stem
        compile_modules([path.name], cwd=path.parent, build=scratch, in_place=True)


if __name__ == "__main__":
    main()
