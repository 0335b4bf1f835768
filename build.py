"""Build pyamx's C extension modules with cffi (API mode, out of line) and setuptools.

``python build.py`` builds them in place (``pyamx/_native*.so``) for
development; ``pip install .`` builds them through setup.py, which takes its
commands from :func:`setuptools_options`. Both go through the same
``build_ext``, so they compile the same thing.

The build decision (:func:`decide`) is made once per build, by a pure
function of the environment, the platform and an injectable compiler check:
is there a C compiler at all (if not, pyamx installs as a pure-Python package
and says why), and does it accept the AMX target attributes and intrinsics
(if not, the modules are built without the AMX kernels and say why). Its
reason is compiled into ``pyamx._native`` and written, with the compiler's
identity, to ``pyamx/_buildinfo.py``, so ``pyamx info`` can tell a user what
happened at build time. Building never needs AMX hardware.

Run as ``python -m build`` from the repository root, Python finds this file
before the ``build`` package; it then hands over to the real package.
"""


import os
import sys


def _hand_over_to_the_build_package() -> None:
    """Run the real ``build`` package as ``python -m build`` would have, without this directory on sys.path."""
    import importlib.util
    import runpy

    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    if importlib.util.find_spec("build") is None:
        sys.exit(
            "python -m build: the `build` package is not installed (pip install build). "
            "This directory's build.py only builds pyamx's C extension in place: python build.py"
        )
    runpy.run_module("build", run_name="__main__", alter_sys=True)
    sys.exit(0)


# `python -m build` imports this file as __main__ with __spec__.name == "build";
# `python build.py` has no __spec__, and setup.py/tests load it under another name.
if __name__ == "__main__" and globals().get("__spec__") is not None and __spec__.name == "build":
    _hand_over_to_the_build_package()


import json  # noqa: E402  (after the hand-over: nothing of this project runs under `-m build`)
import platform  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sysconfig  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Mapping, Optional, Sequence  # noqa: E402

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"

DISABLE_ENV = "PYAMX_DISABLE_AMX_KERNELS"  # build without kernels on purpose
SANITIZE_ENV = "PYAMX_SANITIZE"  # ASan + UBSan build (CI); needs libasan preloaded at run time
REQUIRE_ENV = "PYAMX_REQUIRE_EXTENSION"  # a build without the extension is an error (CI, wheels)
TEST_HOOKS_ENV = "PYAMX_ENGINE_TEST_HOOKS"  # a test build: the compiled engine's test hooks in the API

BUILDINFO = Path("pyamx") / "_buildinfo.py"
GENERATED_DIR = Path("build") / "pyamx-cffi"


@dataclass(frozen=True)
class Module:
    """One compiled module: its cdef headers (fed whole to cffi) and its C sources.

    ``kernels``: its sources hold AMX code, compiled in only when the decision
    says so (``PYAMX_HAVE_AMX``). A module without AMX code builds with any C
    compiler.
    """

    name: str
    headers: tuple  # its C API, fed whole to cffi's cdef() and included by the wrapper, in this order
    sources: tuple  # glob patterns relative to the repository root
    kernels: bool = False
    include_dirs: tuple = ("csrc",)
    # a test build's extra API (TEST_HOOKS_ENV): headers fed to cdef after ``headers``, their code
    # compiled with the macro of the same name as the variable
    test_headers: tuple = ()
    x86_64_linux_only: bool = False  # not built at all elsewhere
    # Symbols bound at load time (-z now): a signal handler's first call through the PLT would
    # otherwise run the lazy binder, which saves the whole XSAVE state (kilobytes) on whatever
    # small stack the handler runs on (docs/run.md, "Signal stacks").
    bind_now: bool = False
    # A plain shared library, no cffi wrapper and no Python in it (pyamx run's preload): shipped
    # as an extension file, never imported. Its own compile and link arguments, never sanitized
    # (ASan's runtime must come first in LD_PRELOAD, which a preloaded library cannot guarantee).
    plain: bool = False
    plain_link_args: tuple = ()


# A new module joins the build with one entry here.
MODULES = (
    # The compiled emulator engine keeps its API in its own header (csrc/engine.h).
    Module("pyamx._native", ("csrc/pyamx.h", "csrc/engine.h"), ("csrc/*.c",), kernels=True,
           test_headers=("csrc/engine_test_hooks.h",)),
    # The trap mode never executes a tile instruction: any C compiler for x86-64 Linux builds it.
    Module("pyamx._trap", ("csrc/trap/trap.h",), ("csrc/trap/*/*.c",), include_dirs=("csrc/trap",),
           x86_64_linux_only=True, bind_now=True),
    # pyamx run's preload library (docs/run.md): the trap plus csrc/preload/, LD_PRELOADed into
    # other programs; compile_args' -fvisibility=hidden keeps the trap's functions private to it.
    Module("pyamx._amxpreload", (), ("csrc/trap/*/*.c", "csrc/preload/*.c"), include_dirs=("csrc/trap",),
           x86_64_linux_only=True, bind_now=True, plain=True,
           plain_link_args=("-ldl",)),
)


def modules_for(machine: str, system: str, modules=MODULES) -> tuple:
    """The modules this platform builds (pure)."""
    x86_64_linux = machine.lower() in ("x86_64", "amd64") and system == "Linux"
    return tuple(m for m in modules if x86_64_linux or not m.x86_64_linux_only)


class BuildConfigError(ValueError):
    """A build setting this script cannot interpret."""


def _env_parser():
    """pyamx/_env.py, the one parser of PYAMX_* variables, loaded by path: the package is not importable
    while it is being built (it needs neither numpy nor cffi)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_pyamx_env", HERE / "pyamx" / "_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean build setting: 1/true/yes, 0/false/no (any case) or empty (= unset); anything else is an error."""
    return _env_parser().flag(
        name, environ=env,
        error=lambda var, value, allowed: BuildConfigError(f"{var}={value!r} is not understood; allowed: {allowed}"),
    )


# -- the decision (pure) ----------------------------------------------------------------

BASIC_TEST_SOURCE = "int pyamx_probe_compiler(int x) { return x + 1; }\n"

AMX_TEST_SOURCE = r"""
#include <immintrin.h>
#if !defined(__x86_64__) || !defined(__linux__)
#error "AMX kernels are built for x86-64 Linux only"
#endif
__attribute__((target("amx-tile,amx-bf16"))) void pyamx_probe_bf16(void *p, long s)
{ _tile_loadd(1, p, s); _tile_dpbf16ps(0, 1, 2); _tile_stored(0, p, s); _tile_release(); }
__attribute__((target("amx-tile,amx-int8"))) void pyamx_probe_int8(void)
{ _tile_dpbssd(0, 1, 2); _tile_dpbuud(3, 4, 5); }
__attribute__((target("amx-tile"))) void pyamx_probe_cfg(void *p)
{ _tile_loadconfig(p); _tile_storeconfig(p); _tile_stream_loadd(0, p, 64); _tile_zero(0); }
"""


@dataclass(frozen=True)
class CompileResult:
    """What one test compile did: ``found`` is False when the compiler could not be run at all."""

    ok: bool
    found: bool = True
    output: str = ""


CompileCheck = Callable[[str], CompileResult]


@dataclass(frozen=True)
class Decision:
    """What to build. ``cause``: why there is no extension (empty when there is one)."""

    extension: bool
    kernels: bool
    reason: str  # why the AMX kernels are (not) compiled in
    cause: str = ""
    sanitize: bool = False


def _summary(output: str, lines: int = 3) -> str:
    picked = [line.strip() for line in output.splitlines() if line.strip()][:lines]
    return " | ".join(picked) or "no diagnostics"


def decide(env: Mapping[str, str], machine: str, system: str, check: CompileCheck) -> Decision:
    """The build decision (pure but for ``check``, which is called at most twice).

    Settings are validated first, so a typo fails the build whatever the
    toolchain. Then: no working C compiler -> no extension; not x86-64 Linux
    -> no kernels; ``PYAMX_DISABLE_AMX_KERNELS`` -> no kernels; a compiler
    that rejects the AMX test source -> no kernels; else kernels.
    """
    disable = parse_flag(env, DISABLE_ENV)
    sanitize = parse_flag(env, SANITIZE_ENV)
    basic = check(BASIC_TEST_SOURCE)
    if not basic.ok:
        if not basic.found:
            cause = f"no C compiler was found ({_summary(basic.output, 1)})"
        else:
            cause = f"the C compiler cannot compile a trivial C file ({_summary(basic.output)})"
        return Decision(extension=False, kernels=False, reason=cause, cause=cause, sanitize=sanitize)
    if machine.lower() not in ("x86_64", "amd64") or system != "Linux":
        reason = f"the AMX kernels are built for x86-64 Linux only; this is {system} {machine}"
        return Decision(True, False, reason, sanitize=sanitize)
    if disable:
        return Decision(True, False, f"{DISABLE_ENV}={env[DISABLE_ENV]} at build time", sanitize=sanitize)
    amx = check(AMX_TEST_SOURCE)
    if not amx.ok:
        reason = ("the C compiler rejects the AMX target attributes or intrinsics (they need GCC >= 11 or "
                  f"clang >= 12 with binutils >= 2.36): {_summary(amx.output, 1)}")
        return Decision(True, False, reason, sanitize=sanitize)
    return Decision(True, True, "the C compiler accepts the AMX target attributes and intrinsics", sanitize=sanitize)


# -- the compiler (live) -----------------------------------------------------------------


def compile_args(sanitize: bool) -> list:
    if os.name == "nt":
        return []
    # -pthread: the compiled engine splits work over threads. -fvisibility=hidden: a module's C
    # functions are reached through its cffi wrapper, never by name from outside, so the module
    # exports its PyInit_ only (Python marks that one visible) and cannot interpose on anyone's symbols.
    if sanitize:
        return ["-O1", "-g", "-std=gnu11", "-pthread", "-fvisibility=hidden", "-fno-omit-frame-pointer",
                "-fsanitize=address,undefined"]
    return ["-O2", "-std=gnu11", "-pthread", "-fvisibility=hidden"]


def link_args(sanitize: bool) -> list:
    if os.name == "nt":
        return []
    return ["-pthread", "-fsanitize=address,undefined"] if sanitize else ["-pthread"]


def bind_now_args(module: Module) -> list:
    return ["-Wl,-z,now"] if module.bind_now and os.name != "nt" else []


def _build_ext_compiler():
    # The very functions setuptools' build_ext makes its compiler with, taken from it: Python 3.12
    # has no distutils, and setuptools' own copy of it is not a public module.
    from setuptools.command.build_ext import customize_compiler, new_compiler

    compiler = new_compiler()
    customize_compiler(compiler)  # honours CC, CFLAGS, CPPFLAGS as build_ext does
    return compiler


def compiler_command() -> list:
    """The command build_ext compiles with (``CC`` and ``CFLAGS`` included)."""
    return list(getattr(_build_ext_compiler(), "compiler_so", None) or ["cc"])


def make_compile_check(command: Sequence[str], extra: Sequence[str]) -> CompileCheck:
    """A check that compiles a source text with ``command + extra``, capturing the compiler's output."""

    def check(source: str) -> CompileResult:
        with tempfile.TemporaryDirectory(prefix="pyamx-cc-") as tmp:
            src = Path(tmp) / "probe.c"
            src.write_text(source, encoding="utf-8")
            argv = [*command, *extra, "-c", str(src), "-o", str(Path(tmp) / "probe.o")]
            try:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      errors="replace", timeout=300)
            except (OSError, subprocess.SubprocessError) as exc:
                return CompileResult(ok=False, found=False, output=f"{command[0]}: {exc}")
            # The scratch directory's name would only make the recorded reason differ from build to build.
            output = (done.stderr + done.stdout).replace(tmp + os.sep, "").strip()
            output = output or f"{command[0]} exited with status {done.returncode}"
            return CompileResult(ok=done.returncode == 0, output=output)

    return check


def compiler_identity(command: Sequence[str]) -> str:
    """The compiler command and its version line: a different compiler gives a different string."""
    try:
        done = subprocess.run([command[0], "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, errors="replace", timeout=60)
        version = _summary(done.stdout, 1)
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"not runnable: {exc}"
    return f"{' '.join(command)} ({version})"


@dataclass(frozen=True)
class BuildPlan:
    """The decision plus what it was made with; its JSON is stamped into every generated source."""

    decision: Decision
    compiler: str
    version: str
    python: str

    def stamp(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


_plan: Optional[BuildPlan] = None
_compile_failure: Optional[str] = None  # set when compiling failed and the build went on without the extension


def plan(env: Optional[Mapping[str, str]] = None) -> BuildPlan:
    """The build plan of this process: decided on first use, then reused by every command."""
    global _plan
    if _plan is None:
        env = os.environ if env is None else env
        require = parse_flag(env, REQUIRE_ENV)  # a typo fails the build whatever the toolchain
        command = compiler_command()
        sanitize = parse_flag(env, SANITIZE_ENV)
        check = make_compile_check(command, compile_args(sanitize))
        decision = decide(env, platform.machine(), platform.system(), check)
        if require and not decision.extension:
            # Here, not in build_ext: once there is no extension, setuptools never runs build_ext.
            raise SystemExit(f"pyamx build: {REQUIRE_ENV}={env[REQUIRE_ENV]} but {decision.cause}")
        _plan = BuildPlan(decision, compiler_identity(command), read_version(), sysconfig.get_platform())
        state = "WITH" if decision.kernels else "WITHOUT"
        what = f"{state} the AMX kernels" if decision.extension else "WITHOUT the C extension"
        print(f"pyamx build: {read_version()} {what}: {decision.reason}"
              f"{' (ASan+UBSan)' if decision.sanitize else ''}", file=sys.stderr)
        if not decision.extension:
            warn_no_extension(decision.cause)
    return _plan


def warn_no_extension(cause: str) -> None:
    bar = "*" * 78
    print(f"\n{bar}\nWARNING: pyamx is installed WITHOUT its C extension because {cause}.\n"
          "The bit-exact emulator works; the native backend and the trap mode do not.\n"
          "Install a C compiler (GCC >= 11 or clang >= 12 for the AMX kernels) and reinstall\n"
          "past pip's cache, which keeps this pure wheel (--no-binary does not skip it):\n"
          "    pip install --force-reinstall --no-cache-dir pyamx    (or the path/URL you installed from)\n"
          f"or set {REQUIRE_ENV}=1 to make this a build error.\n{bar}\n", file=sys.stderr)


# -- sources and the cffi wrappers ----------------------------------------------------------


def read_version() -> str:
    """The package version, from pyamx/_version.py (the single source)."""
    text = (HERE / "pyamx" / "_version.py").read_text(encoding="utf-8")
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.M)
    if not match:
        raise RuntimeError("pyamx/_version.py does not define __version__")
    return match.group(1)


def cdef_text(header: Path = CSRC / "pyamx.h") -> str:
    """The header without preprocessor lines: what cffi's cdef() can parse.

    A local header it includes with quotes (one shared by several modules) is
    inlined in its place; system headers are not.
    """
    header = Path(header)
    out = []
    for line in header.read_text(encoding="utf-8").splitlines():
        included = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if included:
            out.append(cdef_text((header.parent / included.group(1)).resolve()))
        elif not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out)


# -- the files made from the instruction table ------------------------------------------------


def generator():
    """pyamx/table/generate.py, loaded by path: it writes every file made from pyamx/table/isa.py and
    needs neither numpy nor the pyamx package, which a build may not have yet."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pyamx_generate_for_build", HERE / "pyamx" / "table" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def module_sources(module: Module) -> list:
    """The module's C sources, sorted, relative to the repository root."""
    found = set()
    for pattern in module.sources:
        found.update(p.relative_to(HERE).as_posix() for p in HERE.glob(pattern))
    return sorted(found)


def c_sources() -> list:
    """The sources of ``pyamx._native`` (every csrc/*.c file): a new file joins by existing."""
    return module_sources(MODULES[0])


def header_dependencies() -> list:
    """Every header under csrc/ and this script: editing one rebuilds every module."""
    headers = sorted(p.relative_to(HERE).as_posix() for p in CSRC.rglob("*.h"))
    return [*headers, "build.py"]


def dependency_digest() -> str:
    """A hash of every header and this script: stamped into the generated sources, so an edit
    rebuilds even where file times are too coarse to show it (an edit in the second of the build)."""
    import hashlib

    h = hashlib.sha256()
    for rel in header_dependencies():
        h.update(rel.encode() + b"\0" + (HERE / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def c_string(text: str) -> str:
    """``text`` as a C string literal, printable ASCII only (it travels on a compiler command line)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("?")
    return '"' + "".join(out) + '"'


def test_build(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this is a test build (``PYAMX_ENGINE_TEST_HOOKS=1``): the test hooks in the API."""
    return parse_flag(os.environ if env is None else env, TEST_HOOKS_ENV)


def api_headers(module: Module) -> tuple:
    """The headers fed to cdef: the module's own, and its test headers in a test build."""
    return module.headers + (module.test_headers if test_build() else ())


def define_macros(module: Module, p: BuildPlan) -> list:
    macros = [("PYAMX_VERSION", c_string(p.version)),
              ("PYAMX_BUILD_KERNELS_REASON", c_string(p.decision.reason))]
    if module.kernels and p.decision.kernels:
        macros.append(("PYAMX_HAVE_AMX", "1"))
    if module.test_headers and test_build():
        macros.append((TEST_HOOKS_ENV, "1"))
    return macros


def make_ffi(module: Module, p: BuildPlan, digest: str = ""):
    """The cffi builder of one module. The plan's stamp and the headers' digest are part of the
    generated C, so a changed compiler, setting or header changes that file, and build_ext then
    rebuilds the modules instead of reusing them."""
    from cffi import FFI

    builder = FFI()
    headers = api_headers(module)
    builder.cdef("\n".join(cdef_text(HERE / h) for h in headers))
    includes = "".join(f'#include "{os.path.basename(h)}"\n' for h in headers)
    preamble = (f'/* pyamx build configuration: {p.stamp().replace("*/", "* /")} */\n'
                f'/* pyamx headers: {digest} */\n{includes}')
    builder.set_source(module.name, preamble)
    return builder


def _limited_api() -> bool:
    # cffi's generated code uses the stable ABI except on debug and free-threaded builds.
    return not hasattr(sys, "gettotalrefcount") and not sysconfig.get_config_var("Py_GIL_DISABLED")


def extension(module: Module, p: BuildPlan):
    """``(Extension, changed)`` of one module, its cffi wrapper (re)generated under build/;
    ``changed``: the wrapper differs from the last build's (configuration or headers)."""
    from setuptools import Extension

    if module.plain:
        return Extension(
            module.name,
            sources=module_sources(module),
            include_dirs=list(module.include_dirs),
            define_macros=[("PYAMX_VERSION", c_string(p.version))],
            extra_compile_args=compile_args(False),
            extra_link_args=link_args(False) + list(module.plain_link_args) + bind_now_args(module),
            depends=header_dependencies(),
            py_limited_api=_limited_api(),
        ), False
    generated = GENERATED_DIR / (module.name.replace(".", "_") + ".c")
    path = HERE / generated
    path.parent.mkdir(parents=True, exist_ok=True)
    before = path.read_bytes() if path.exists() else None
    make_ffi(module, p, dependency_digest()).emit_c_code(str(path))  # rewrites the file only when it changed
    changed = before != path.read_bytes()
    return Extension(
        module.name,
        sources=[generated.as_posix(), *module_sources(module)],
        include_dirs=list(module.include_dirs),
        define_macros=define_macros(module, p),
        extra_compile_args=compile_args(p.decision.sanitize),
        extra_link_args=link_args(p.decision.sanitize) + bind_now_args(module),
        depends=header_dependencies(),
        py_limited_api=_limited_api(),
    ), changed


def buildinfo_text(p: BuildPlan, failure: str = "") -> str:
    """pyamx/_buildinfo.py: what was built and why, readable without the extension."""
    d = p.decision
    cause = failure or d.cause
    fields = {
        "EXTENSION": d.extension and not failure,
        "CAUSE": cause,
        "KERNELS": d.kernels and not cause,
        "KERNELS_REASON": d.reason if not cause else cause,
        "SANITIZE": d.sanitize,
        "COMPILER": p.compiler,
        "VERSION": p.version,
    }
    body = "".join(f"{key} = {value!r}\n" for key, value in fields.items())
    return ('"""What the build of this pyamx decided and why (written by build.py at build time)."""\n\n'
            + body)


def compile_failure_text(exc: BaseException) -> str:
    """A short cause for a failed extension compile: the file and the status, not the whole command."""
    text = str(exc)
    source = re.search(r"'-c', '([^']+)'", text)
    status = re.search(r"exit status (\d+)", text)
    if source:
        tail = f" (exit status {status.group(1)}; the compiler's messages are in the build log)" if status else ""
        return f"compiling {source.group(1)} failed{tail}"
    return f"compiling it failed: {type(exc).__name__}: {text[:300]}"


def ship_docs(build_lib: Path) -> None:
    """docs/*.md into the package (pyamx/docs/): the messages that send a user to a doc
    (pyamx/_docs.py) must find it in a wheel too."""
    target = Path(build_lib) / "pyamx" / "docs"
    target.mkdir(parents=True, exist_ok=True)
    for source in sorted((HERE / "docs").glob("*.md")):
        shutil.copyfile(source, target / source.name)


def write_buildinfo(directory: Path, text: str) -> None:
    path = Path(directory) / BUILDINFO
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


# -- setuptools commands -------------------------------------------------------------------


def setuptools_options() -> dict:
    """setup() keywords: placeholder extensions (filled in by build_ext) and the commands.

    The decision is made lazily, by the first command that needs it (build_py
    writes _buildinfo.py, bdist_wheel picks the wheel tag, build_ext
    compiles), so metadata-only steps of a pip install compile nothing.
    """
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext
    from setuptools.command.build_py import build_py

    class PyamxDistribution(Distribution):
        def has_ext_modules(self):
            # Before the decision, assume an extension; a build without one is pure (py3-none-any).
            return _plan is None or (_plan.decision.extension and _compile_failure is None)

    def buildinfo_dirs(cmd, in_place):
        # In place (python build.py, editable installs) the record sits next to the module in the
        # checkout; otherwise only in the build's output, so `pip install .` leaves the checkout alone.
        if in_place:
            return [HERE]
        return [Path(cmd.get_finalized_command("build_py").build_lib)]

    class BuildPy(build_py):
        def run(self):
            super().run()
            in_place = getattr(self, "editable_mode", False)
            for d in buildinfo_dirs(self, in_place):
                write_buildinfo(d, buildinfo_text(plan()))
            if not in_place:  # a checkout has them beside the package already
                ship_docs(Path(self.build_lib))

    class BuildExt(build_ext):
        """build_ext that fills in the modules from the plan; optional unless REQUIRE_ENV or in place."""

        require = False

        def run(self):
            made = generator()
            try:
                written = made.write(HERE, only=made.BUILD_FILES)
            except made.GenerateError as exc:
                raise SystemExit(f"pyamx build: {exc}") from None
            for rel in written:
                print(f"pyamx build: regenerated {rel.as_posix()} from pyamx/table/isa.py", file=sys.stderr)
            p = plan()
            require = self.require or parse_flag(os.environ, REQUIRE_ENV)
            if not p.decision.extension:
                if require:
                    raise SystemExit(f"pyamx build: {REQUIRE_ENV} is set but {p.decision.cause}")
                self._give_up(p, p.decision.cause)
                return
            by_name = {m.name: m for m in modules_for(platform.machine(), platform.system())}
            self.extensions = [ext for ext in self.extensions if ext.name in by_name]
            changed = []
            for ext in self.extensions:  # the placeholders setuptools finalized, filled in place
                built, differs = extension(by_name[ext.name], p)
                for attr in ("sources", "include_dirs", "define_macros", "extra_compile_args",
                             "extra_link_args", "depends", "py_limited_api"):
                    setattr(ext, attr, getattr(built, attr))
                if differs:
                    changed.append(ext.name)
            if changed and not self.force:
                # File times alone can miss a change made within the second of the last build.
                print(f"pyamx build: rebuilding {', '.join(changed)}: the build configuration or a header "
                      "changed", file=sys.stderr)
                self.force = True
            try:
                super().run()
            except Exception as exc:
                if require:
                    raise
                global _compile_failure
                _compile_failure = compile_failure_text(exc)
                self._give_up(p, _compile_failure)
                return
            for d in buildinfo_dirs(self, self._in_place()):
                write_buildinfo(d, buildinfo_text(p))
            if self.inplace:
                self._remove_other_builds()

        def _in_place(self):
            return bool(self.inplace or getattr(self, "editable_mode", False))

        def _give_up(self, p, cause):
            self.extensions = []
            text = buildinfo_text(p, failure=cause if p.decision.extension else "")
            for d in buildinfo_dirs(self, self._in_place()):
                write_buildinfo(d, text)
            if self.inplace:
                self._remove_other_builds(keep=False)
            if p.decision.extension:  # plan() already warned when there was no compiler
                warn_no_extension(cause)

        def _remove_other_builds(self, keep=True):
            # An in-place module with another suffix (cpython-3xx vs abi3) would shadow the new one.
            for m in MODULES:
                wanted = Path(self.get_ext_fullpath(m.name)).resolve() if keep else None
                package, _, leaf = m.name.rpartition(".")
                for old in (HERE / package.replace(".", "/")).glob(leaf + ".*"):
                    if old.suffix in (".so", ".pyd") and old.resolve() != wanted:
                        old.unlink()

    cmdclass = {"build_py": BuildPy, "build_ext": BuildExt}
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:  # setuptools < 70.1: pyproject.toml requires newer, this is only `python build.py`
        bdist_wheel = None
    if bdist_wheel is not None:
        class BdistWheel(bdist_wheel):
            # The tag depends on the decision, made here and not in finalize_options, which
            # pip's metadata step also runs: one decision per build.
            # Building first (run_command runs a command once) lets a failed compile make it pure too.
            def run(self):
                plan()
                if not self.skip_build:
                    self.run_command("build")
                extension = self.distribution.has_ext_modules()
                self.root_is_pure = not extension  # no compiler, or a failed compile: py3-none-any
                if extension and _limited_api():
                    self.py_limited_api = "cp310"  # cffi modules use the stable ABI; pyamx needs >= 3.10
                    self._validate_py_limited_api()
                super().run()

        cmdclass["bdist_wheel"] = BdistWheel
    return {
        "distclass": PyamxDistribution,
        "cmdclass": cmdclass,
        "ext_modules": [Extension(m.name, sources=[], py_limited_api=_limited_api()) for m in MODULES],
    }


def main() -> None:
    """Build in place: the modules land in pyamx/, the intermediates in build/; failures are errors."""
    from setuptools import Distribution  # noqa: F401

    os.chdir(HERE)
    opts = setuptools_options()
    dist = opts["distclass"]({"name": "pyamx", "script_name": "build.py", "ext_modules": opts["ext_modules"],
                              "cmdclass": opts["cmdclass"]})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.require = True
    dist.run_command("build_ext")
    for m in modules_for(platform.machine(), platform.system()):
        print(f"pyamx build: {m.name} is in place: {Path(cmd.get_ext_fullpath(m.name)).relative_to(HERE)}",
              file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except BuildConfigError as exc:
        sys.exit(f"pyamx build: {exc}")
