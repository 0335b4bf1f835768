"""The build: the decision as a pure function, the stamp that forces rebuilds, packaging, `python -m build`.

The tests that build or install in a scratch copy take a minute each and run
where PYAMX_BUILD_TESTS=1 (the build leg of .ci/run sets it).
"""

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_PY = os.path.join(CHECKOUT, "build.py")

if not os.path.exists(BUILD_PY):
    pytest.skip("build.py is not next to these tests (an installed copy of the tests)", allow_module_level=True)


def _load_build_script():
    spec = importlib.util.spec_from_file_location("pyamx_build_script_under_test", BUILD_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # compiles nothing
    return module


build = _load_build_script()

slow_build = pytest.mark.skipif(os.environ.get("PYAMX_BUILD_TESTS") != "1",
                                reason="builds in a scratch copy (about a minute): set PYAMX_BUILD_TESTS=1")


class FakeCompiler:
    """An injectable compile check: records what it was asked to compile."""

    def __init__(self, basic=True, amx=True, found=True, output=""):
        self.basic, self.amx, self.found, self.output = basic, amx, found, output
        self.calls = []

    def __call__(self, source):
        is_amx = "amx-tile" in source
        self.calls.append("amx" if is_amx else "basic")
        ok = self.amx if is_amx else self.basic
        ok = ok and self.found
        return build.CompileResult(ok=ok, found=self.found, output="" if ok else self.output)


# -- the decision ----------------------------------------------------------------------------


def test_a_compiler_that_accepts_amx_gives_kernels_after_two_test_compiles():
    cc = FakeCompiler()
    d = build.decide({}, "x86_64", "Linux", cc)
    assert d.extension and d.kernels and d.cause == "" and not d.sanitize
    assert "accepts" in d.reason
    assert cc.calls == ["basic", "amx"]


def test_no_compiler_gives_no_extension_and_names_the_cause():
    cc = FakeCompiler(found=False, output="gcc: [Errno 2] No such file or directory: 'gcc'")
    d = build.decide({}, "x86_64", "Linux", cc)
    assert not d.extension and not d.kernels
    assert d.cause.startswith("no C compiler was found") and "No such file" in d.cause
    assert d.reason == d.cause
    assert cc.calls == ["basic"]


def test_a_broken_compiler_gives_no_extension_with_its_diagnostics():
    cc = FakeCompiler(basic=False, output="cc1: fatal error: something\nmore\n")
    d = build.decide({}, "x86_64", "Linux", cc)
    assert not d.extension and "cannot compile a trivial C file" in d.cause and "fatal error" in d.cause


def test_a_compiler_without_amx_builds_the_module_without_kernels():
    cc = FakeCompiler(amx=False, output="error: attribute(target(\"amx-tile\")) is unknown\n")
    d = build.decide({}, "x86_64", "Linux", cc)
    assert d.extension and not d.kernels and d.cause == ""
    assert "rejects the AMX" in d.reason and "amx-tile" in d.reason


@pytest.mark.parametrize("machine, system", [("aarch64", "Linux"), ("arm64", "Darwin"), ("x86_64", "Darwin"),
                                             ("ppc64le", "Linux")])
def test_other_platforms_build_without_kernels_and_skip_the_amx_test_compile(machine, system):
    cc = FakeCompiler()
    d = build.decide({}, machine, system, cc)
    assert d.extension and not d.kernels
    assert "x86-64 Linux only" in d.reason and machine in d.reason
    assert cc.calls == ["basic"]


@pytest.mark.parametrize("value", ["1", "true", "YES", "Yes"])
def test_disable_env_builds_without_kernels_and_says_so(value):
    cc = FakeCompiler()
    d = build.decide({build.DISABLE_ENV: value}, "x86_64", "Linux", cc)
    assert d.extension and not d.kernels
    assert d.reason == f"{build.DISABLE_ENV}={value} at build time"
    assert cc.calls == ["basic"]


@pytest.mark.parametrize("value", ["", "0", "false", "No"])
def test_disable_env_off_values_keep_the_kernels(value):
    d = build.decide({build.DISABLE_ENV: value}, "x86_64", "Linux", FakeCompiler())
    assert d.kernels


@pytest.mark.parametrize("name", ["PYAMX_DISABLE_AMX_KERNELS", "PYAMX_SANITIZE"])
@pytest.mark.parametrize("value", ["2", "on", "y", "maybe"])
def test_unknown_setting_values_are_errors_before_any_compile(name, value):
    cc = FakeCompiler()
    with pytest.raises(build.BuildConfigError, match=f"{name}='{value}'"):
        build.decide({name: value}, "x86_64", "Linux", cc)
    assert cc.calls == []


def test_sanitize_setting_is_carried_and_adds_the_sanitizer_flags():
    d = build.decide({build.SANITIZE_ENV: "1"}, "x86_64", "Linux", FakeCompiler())
    assert d.sanitize and d.kernels
    assert "-fsanitize=address,undefined" in build.compile_args(True)
    assert "-fsanitize=address,undefined" in build.link_args(True)
    assert not any("sanitize" in a for a in build.compile_args(False) + build.link_args(False))


# -- the live compile check --------------------------------------------------------------------


def test_live_check_reports_a_missing_compiler_as_not_found(tmp_path):
    check = build.make_compile_check([str(tmp_path / "no-such-cc")], [])
    result = check(build.BASIC_TEST_SOURCE)
    assert not result.ok and not result.found and "no-such-cc" in result.output


def test_live_check_captures_the_compilers_output_without_touching_our_fds(tmp_path, capfd):
    cc = tmp_path / "noisy-cc"
    cc.write_text("#!/bin/sh\necho 'noisy-cc: error: no AMX here' >&2\nexit 1\n")
    cc.chmod(0o755)
    result = build.make_compile_check([str(cc)], [])(build.AMX_TEST_SOURCE)
    assert not result.ok and result.found and "no AMX here" in result.output
    out, err = capfd.readouterr()
    assert "no AMX here" not in out + err


def test_live_check_with_a_silent_failing_compiler_says_how_it_failed():
    result = build.make_compile_check(["false"], [])(build.BASIC_TEST_SOURCE)
    assert not result.ok and "exited with status 1" in result.output


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_live_check_with_gcc_compiles_the_basic_source():
    assert build.make_compile_check(["gcc"], build.compile_args(False))(build.BASIC_TEST_SOURCE).ok


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_ci_wrapper_compiler_rejects_amx_and_compiles_the_rest():
    wrapper = os.path.join(CHECKOUT, ".ci", "cc-without-amx")
    check = build.make_compile_check([sys.executable, wrapper], build.compile_args(False))
    assert check(build.BASIC_TEST_SOURCE).ok
    # immintrin.h of a new GCC names AMX itself: only the code being compiled counts
    assert check("#include <immintrin.h>\nint f(int x) { return x; }\n").ok
    rejected = check(build.AMX_TEST_SOURCE)
    assert not rejected.ok and "amx" in rejected.output
    # the reason is stamped into the generated source: it must not vary between builds (scratch paths)
    assert check(build.AMX_TEST_SOURCE).output == rejected.output


# -- the plan: PYAMX_REQUIRE_EXTENSION -----------------------------------------------------------


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    """build.plan() decided afresh, with a compiler that does not exist."""
    monkeypatch.setattr(build, "_plan", None)
    monkeypatch.setattr(build, "compiler_command", lambda: [str(tmp_path / "no-such-cc")])


def test_require_extension_fails_the_plan_itself_without_a_compiler(no_compiler, capsys):
    # bdist_wheel decides through plan() and, with no extension, setuptools never runs build_ext:
    # the plan is the one place every build passes.
    with pytest.raises(SystemExit, match=f"{build.REQUIRE_ENV}=1 but no C compiler was found"):
        build.plan({build.REQUIRE_ENV: "1"})
    assert build._plan is None


def test_without_require_extension_the_plan_is_pure_and_warns_how_to_really_rebuild(no_compiler, capsys):
    p = build.plan({})
    assert not p.decision.extension
    err = capsys.readouterr().err
    assert "WITHOUT its C extension" in err and "--no-cache-dir" in err and build.REQUIRE_ENV in err


def test_a_misspelt_require_extension_fails_before_any_compile(no_compiler, monkeypatch):
    monkeypatch.setattr(build, "make_compile_check", lambda *a: pytest.fail("compiled"))
    with pytest.raises(build.BuildConfigError, match=f"{build.REQUIRE_ENV}='on'"):
        build.plan({build.REQUIRE_ENV: "on"})


def test_build_script_imports_no_distutils():
    import ast

    tree = ast.parse(open(BUILD_PY, encoding="utf-8").read())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    assert not [name for name in imported if name.split(".")[0] == "distutils"]  # Python 3.12 has none
    assert build.compiler_command()  # what build_ext would compile with, found without it


# -- what the build writes ------------------------------------------------------------------------


def _plan(decision):
    return build.BuildPlan(decision, compiler="cc (cc 1.0)", version="9.9.9", python="linux-x86_64")


def test_the_stamp_changes_with_the_decision_and_the_compiler():
    a = build.Decision(True, True, "ok")
    b = build.Decision(True, False, f"{build.DISABLE_ENV}=1 at build time")
    assert _plan(a).stamp() != _plan(b).stamp()
    other_cc = build.BuildPlan(a, compiler="clang (clang 17)", version="9.9.9", python="linux-x86_64")
    assert other_cc.stamp() != _plan(a).stamp()
    assert _plan(a).stamp() == _plan(build.Decision(True, True, "ok")).stamp()


def test_generated_source_carries_the_stamp_and_is_rewritten_only_when_it_changes(tmp_path):
    module = build.MODULES[0]
    first = tmp_path / "first.c"
    build.make_ffi(module, _plan(build.Decision(True, True, "ok")), "d1").emit_c_code(str(first))
    text = first.read_text()
    assert "pyamx build configuration" in text and '"kernels": true' in text
    mtime = first.stat().st_mtime_ns
    os.utime(first, ns=(mtime - 10**9, mtime - 10**9))
    build.make_ffi(module, _plan(build.Decision(True, True, "ok")), "d1").emit_c_code(str(first))
    assert first.stat().st_mtime_ns == mtime - 10**9  # unchanged config: left alone, no rebuild
    build.make_ffi(module, _plan(build.Decision(True, False, "no")), "d1").emit_c_code(str(first))
    assert '"kernels": false' in first.read_text()
    build.make_ffi(module, _plan(build.Decision(True, False, "no")), "d2").emit_c_code(str(first))
    assert "pyamx headers: d2" in first.read_text()


def test_macros_carry_the_reason_and_kernels_only_for_modules_with_amx_code():
    p = _plan(build.Decision(True, True, 'the "quoted" reason \\ with a backslash'))
    native = dict(build.define_macros(build.MODULES[0], p))
    assert native["PYAMX_HAVE_AMX"] == "1"
    assert native["PYAMX_BUILD_KERNELS_REASON"] == r'"the \"quoted\" reason \\ with a backslash"'
    plain = build.Module("pyamx._plain", ("csrc/pyamx.h",), ("csrc/*.c",), kernels=False)
    assert "PYAMX_HAVE_AMX" not in dict(build.define_macros(plain, p))
    off = dict(build.define_macros(build.MODULES[0], _plan(build.Decision(True, False, "no"))))
    assert "PYAMX_HAVE_AMX" not in off


def test_modules_limited_to_x86_64_linux_are_left_out_elsewhere():
    everywhere = build.Module("pyamx._a", ("csrc/pyamx.h",), ("csrc/*.c",))
    x86_only = build.Module("pyamx._b", ("csrc/pyamx.h",), ("csrc/*.c",), x86_64_linux_only=True)
    both = (everywhere, x86_only)
    assert build.modules_for("x86_64", "Linux", both) == both
    assert build.modules_for("aarch64", "Linux", both) == (everywhere,)
    assert build.modules_for("x86_64", "Darwin", both) == (everywhere,)
    assert build.MODULES[0] in build.modules_for("aarch64", "Linux")  # the product module is everywhere


def test_cdef_inlines_quoted_local_headers_and_drops_system_ones(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "shared.h").write_text("#ifndef S\n#define S\nenum op { OP_A = 1 };\n#endif\n")
    (tmp_path / "sub" / "mod.h").write_text('#include <stdint.h>\n#include "../shared.h"\nint f(enum op);\n')
    text = build.cdef_text(tmp_path / "sub" / "mod.h")
    assert text.split() == "enum op { OP_A = 1 }; int f(enum op);".split()


def test_every_header_is_a_dependency_of_every_module():
    deps = build.header_dependencies()
    headers = {f"csrc/{n}" for n in os.listdir(os.path.join(CHECKOUT, "csrc")) if n.endswith(".h")}
    assert headers <= set(deps) and "build.py" in deps


def test_build_script_feeds_the_whole_header_and_every_source():
    cdef = build.cdef_text()
    assert "#" not in "".join(line.split("/*")[0] for line in cdef.splitlines())
    assert "pyamx_request_permission" in cdef and "pyamx_build_kernels_reason" in cdef
    sources = build.c_sources()
    expected = sorted(f"csrc/{name}" for name in os.listdir(os.path.join(CHECKOUT, "csrc")) if name.endswith(".c"))
    assert sources == expected
    from pyamx._version import __version__

    assert build.read_version() == __version__


def test_buildinfo_records_a_missing_extension_and_a_failed_compile():
    no_cc = build.Decision(False, False, "no C compiler was found (x)", cause="no C compiler was found (x)")
    ns = {}
    exec(build.buildinfo_text(_plan(no_cc)), ns)
    assert ns["EXTENSION"] is False and ns["CAUSE"] == "no C compiler was found (x)" and ns["KERNELS"] is False
    ns = {}
    exec(build.buildinfo_text(_plan(build.Decision(True, True, "ok")), failure="compiling it failed: boom"), ns)
    assert ns["EXTENSION"] is False and ns["CAUSE"] == "compiling it failed: boom"
    ns = {}
    exec(build.buildinfo_text(_plan(build.Decision(True, False, "why not"))), ns)
    assert ns["EXTENSION"] is True and ns["KERNELS"] is False and ns["KERNELS_REASON"] == "why not"


def test_a_failed_compile_is_named_by_its_file_not_its_command_line():
    exc = Exception("Command '['cc', '-O2', '-DX=\"a b\"', '-c', 'csrc/detect.c', '-o', 'x.o']' "
                    "returned non-zero exit status 1.")
    assert build.compile_failure_text(exc) == ("compiling csrc/detect.c failed (exit status 1; the compiler's "
                                               "messages are in the build log)")
    assert build.compile_failure_text(OSError("boom")) == "compiling it failed: OSError: boom"


def test_the_built_module_reports_the_reason_it_was_built_with():
    native = pytest.importorskip("pyamx._native", reason="the C extension is not built (python build.py)")
    from pyamx.cpu import _nativelib

    reason = native.ffi.string(native.lib.pyamx_build_kernels_reason()).decode()
    info = _nativelib.build_info()
    if info is None:
        pytest.skip("no pyamx/_buildinfo.py next to this module (built by something other than build.py)")
    assert reason == info.KERNELS_REASON
    assert bool(native.lib.pyamx_build_kernels()) == info.KERNELS


@pytest.mark.parametrize("name", ["pyamx._native", "pyamx._trap"])
def test_a_built_module_exports_its_python_entry_and_nothing_else(name):
    """Its C functions are reached through cffi: exported, they could interpose on (or be taken for)
    another library's symbols of the same name in a process that loads both globally."""
    nm = shutil.which("nm")
    if nm is None or sys.platform != "linux":
        pytest.skip("needs nm on Linux")
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip(f"{name} is not built here (python build.py)")
    defined = subprocess.run([nm, "-D", "--defined-only", spec.origin], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    functions = [line.split()[-1] for line in defined if line.split()[-2] in ("T", "W", "i")]
    assert functions == [f"PyInit_{name.rsplit('.', 1)[1]}"], functions


def test_not_built_message_names_the_recorded_cause():
    from pyamx.cpu import _nativelib

    class Info:
        EXTENSION = False
        CAUSE = "no C compiler was found (gcc: not found)"

    message = _nativelib.not_built_message(Info, ImportError("x"))
    assert "built without the C extension because no C compiler was found" in message
    assert "pip install ." in _nativelib.not_built_message(None, ImportError("x"))


# -- running without the extension: an unbuilt checkout, a compiler-less install -----------------------


def _unbuilt_copy(tmp_path, checkout: bool, extension_recorded=None):
    """pyamx's Python files without any compiled module, in tmp_path/src: a source checkout that was
    never built (build.py and csrc/ beside it), or an install whose _buildinfo.py records no extension."""
    root = tmp_path / "src"
    package = os.path.join(CHECKOUT, "pyamx")
    shutil.copytree(package, root / "pyamx",
                    ignore=lambda d, names: [n for n in names if n.endswith((".so", ".pyd")) or n == "__pycache__"
                                             or n == "_buildinfo.py"])
    if checkout:
        shutil.copy2(BUILD_PY, root / "build.py")
        (root / "csrc").mkdir()
    if extension_recorded is False:
        (root / "pyamx" / "_buildinfo.py").write_text(
            "EXTENSION = False\nCAUSE = 'no C compiler was found (cc: not found)'\nKERNELS = False\n"
            "KERNELS_REASON = CAUSE\nSANITIZE = False\nCOMPILER = 'cc'\nVERSION = ''\n")
    return root


_USE = ("import numpy as np, pyamx\n"
        "a = np.ones((4, 4), np.float16)\n"
        "for _ in range(3):\n"
        "    r = pyamx.matmul(a, a, backend='emulator')  # the user's line\n"
        "print('ok', r.engine)\n")


def _bare_python(root, *args):
    """``python -S ARGS`` in ``root`` with numpy and cffi importable: without site, an editable
    install's import hook cannot hand it this checkout's compiled modules."""
    import numpy

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAMX_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(numpy.__file__))
    return subprocess.run([sys.executable, "-S", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def _run_script(root, *options, prelude=""):
    script = root / "user_script.py"
    script.write_text(prelude + _USE)
    return _bare_python(root, *options, str(script))


def test_a_script_in_an_unbuilt_checkout_is_told_once_how_to_build_it(tmp_path):
    root = _unbuilt_copy(tmp_path, checkout=True)
    done = _run_script(root, "-W", "default")
    assert done.returncode == 0 and done.stdout == "ok numpy\n", done.stderr
    assert done.stderr.count("ExtensionWarning") == 1, done.stderr
    assert f"source checkout {root}, whose C extension is not built" in done.stderr
    assert "`pip install -e .` or `python build.py`" in done.stderr
    assert "user_script.py:4: ExtensionWarning" in done.stderr  # at the user's line, not inside pyamx


@pytest.mark.parametrize("options", [["-W", "error"], ["-W", "error::RuntimeWarning"]])
def test_the_extension_warning_never_fails_a_matmul_under_w_error(tmp_path, options):
    root = _unbuilt_copy(tmp_path, checkout=False, extension_recorded=False)
    done = _run_script(root, *options)
    assert done.returncode == 0 and done.stdout == "ok numpy\n", done.stderr
    assert "Traceback" not in done.stderr


def test_the_extension_warning_is_a_runtime_warning_users_filter_by_category(tmp_path):
    from pyamx.errors import ExtensionWarning

    assert issubclass(ExtensionWarning, RuntimeWarning)
    root = _unbuilt_copy(tmp_path, checkout=False, extension_recorded=False)
    shown = _run_script(root, "-W", "default")
    assert shown.stderr.count("ExtensionWarning") == 1 and "--no-cache-dir" in shown.stderr, shown.stderr
    assert "user_script.py:4" in shown.stderr
    by_category = "import warnings, pyamx.errors\nwarnings.simplefilter('ignore', pyamx.errors.ExtensionWarning)\n"
    quiet = _run_script(root, "-W", "default", prelude=by_category)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    # -W cannot name a category of a package it has not imported yet: docs/downstream.md gives this form
    quiet = _run_script(root, "-W", "default", "-W", "ignore:pyamx:RuntimeWarning")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_the_command_line_shows_the_extension_warning_as_one_line(tmp_path):
    root = _unbuilt_copy(tmp_path, checkout=False, extension_recorded=False)
    done = _bare_python(root, "-m", "pyamx", "demo", "--backend", "emulator")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "warning" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("pyamx: warning: pyamx was built without the C extension"), \
        done.stderr


def test_cpuinfo_amx_flags_are_read_without_the_extension():
    from pyamx.cpu import detect

    text = "processor\t: 0\nflags\t\t: fpu sse2 amx_bf16 avx512f amx_tile amx_int8\n\nprocessor\t: 1\nflags\t: fpu\n"
    assert detect.cpuinfo_amx_flags(text) == ("amx_tile", "amx_bf16", "amx_int8")
    assert detect.cpuinfo_amx_flags("flags : fpu sse2\n") == ()
    assert detect.cpuinfo_amx_flags("") == ()


# -- `python -m build` from the root ---------------------------------------------------------------


def _scratch_copy(tmp_path):
    """The tracked and untracked-but-not-ignored files of this checkout, without build outputs."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=CHECKOUT,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    dest = tmp_path / "src"
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = os.path.join(CHECKOUT, rel)
        if os.path.isfile(src):
            os.makedirs(dest / os.path.dirname(rel), exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def test_python_m_build_without_the_build_package_says_what_to_do(tmp_path):
    # An interpreter without the `build` package, at the repository root: the hand-over explains itself.
    src = _scratch_copy(tmp_path)
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "build"], cwd=src, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert "the `build` package is not installed" in done.stderr
    assert not (src / "dist").exists() and not (src / "build").exists()


def test_python_m_build_at_the_root_reaches_the_build_package(tmp_path):
    # Asked of the installed distributions: `import build` here would find the checkout's own build.py.
    try:
        importlib.metadata.version("build")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs the `build` package (pip install build)")
    src = _scratch_copy(tmp_path)
    done = subprocess.run([sys.executable, "-m", "build", "--version"], cwd=src, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("build ") and "pyamx" not in done.stdout + done.stderr
    assert not (src / "build").exists()


@slow_build
def test_python_m_build_at_the_root_builds_an_abi3_wheel_and_a_complete_sdist(tmp_path):
    # Asked of the installed distributions: `import build` here would find the checkout's own build.py.
    try:
        importlib.metadata.version("build")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs the `build` package (pip install build)")
    src = _scratch_copy(tmp_path)
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel"], cwd=src, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    dist = sorted(os.listdir(src / "dist"))
    wheels = [d for d in dist if d.endswith(".whl")]
    sdists = [d for d in dist if d.endswith(".tar.gz")]
    assert len(wheels) == 1 and len(sdists) == 1
    assert "-cp310-abi3-" in wheels[0]
    with zipfile.ZipFile(src / "dist" / wheels[0]) as whl:
        names = whl.namelist()
    assert any(n.startswith("pyamx/_native.abi3") for n in names)
    assert "pyamx/py.typed" in names and "pyamx/_buildinfo.py" in names
    # every package of the layout (an explicit packages list forgets quietly)
    package = Path(CHECKOUT) / "pyamx"
    sources = {p.relative_to(CHECKOUT).as_posix() for p in package.rglob("*.py")}
    assert {s for s in sources if "/__pycache__/" not in s} <= set(names)
    # the docs the messages point at travel inside the package, and the metadata says where the project lives
    assert {f"pyamx/docs/{n}" for n in os.listdir(os.path.join(CHECKOUT, "docs")) if n.endswith(".md")} <= set(names)
    with zipfile.ZipFile(src / "dist" / wheels[0]) as whl:
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Project-URL: Documentation, " in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    import tarfile

    with tarfile.open(src / "dist" / sdists[0]) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    for needed in ("LICENSE", "build.py", "setup.py", "csrc/pyamx.h", "tests/conftest.py", "tests/reference.py",
                   "tests/childproc.py", "tests/data/emulator-sdm-seed2026.json", "docs/native.md",
                   "benchmarks/bench_emulator.py", "pyamx/py.typed"):
        assert needed in members, needed
    # every file of the checkout that the package, its build or its tests use travels (a new one included)
    shipped_dirs = ("pyamx/", "csrc/", "tests/", "docs/", "benchmarks/", ".ci/", "examples/")
    tracked = [p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()]
    missing = [p for p in tracked if p.startswith(shipped_dirs) and "/__pycache__/" not in p
               and not p.startswith(("pyamx/_native", "pyamx/_trap", "pyamx/_buildinfo"))
               and p not in members]
    assert missing == []
    assert "pyamx/_buildinfo.py" not in members
    assert not any(m.endswith((".so", ".o")) for m in members)


@slow_build
def test_install_without_a_compiler_is_pure_and_says_why(tmp_path):
    src = _scratch_copy(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    env = dict(os.environ, CC="/bin/false")
    env.pop("PYAMX_REQUIRE_EXTENSION", None)
    done = subprocess.run([str(py), "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wh"), str(src)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheels = os.listdir(tmp_path / "wh")
    assert len(wheels) == 1 and wheels[0].endswith("-py3-none-any.whl"), wheels
    done = subprocess.run([str(py), "-m", "pip", "install", "-q", str(tmp_path / "wh" / wheels[0])], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    info = subprocess.run([str(venv / "bin" / "pyamx"), "info"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    text = info.stdout + info.stderr
    assert "built without the C extension because the C compiler cannot compile a trivial C file" in text, text
    assert "cpu flags (/proc/cpuinfo)" in text, text
    use = subprocess.run([str(py), "-W", "always", "-c",
                          "import pyamx.cpu.native as n\ntry:\n n.NativeMachine()\nexcept Exception as e: print(type(e).__name__, e)"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "ExtensionWarning" in use.stderr and "because the C compiler cannot compile" in use.stderr, use.stderr


@slow_build
def test_require_extension_fails_a_build_without_a_compiler(tmp_path):
    src = _scratch_copy(tmp_path)
    env = dict(os.environ, CC="/bin/false", PYAMX_REQUIRE_EXTENSION="1")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wh"), str(src)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode != 0
    assert "PYAMX_REQUIRE_EXTENSION=1 but the C compiler cannot compile a trivial C file" in done.stdout + done.stderr
    assert not (tmp_path / "wh").exists() or os.listdir(tmp_path / "wh") == []


def _sdist(tmp_path):
    """An sdist of this checkout, made as docs/downstream.md says (python -m build --sdist)."""
    # Asked of the installed distributions: `import build` here would find the checkout's own build.py.
    try:
        importlib.metadata.version("build")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs the `build` package (pip install build)")
    src = _scratch_copy(tmp_path)
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path / "sdist")], cwd=src,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (sdist,) = os.listdir(tmp_path / "sdist")
    return tmp_path / "sdist" / sdist


@slow_build
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_reinstall_advice_rebuilds_where_a_plain_reinstall_gets_the_cached_pure_wheel(tmp_path):
    from pyamx.cpu import _nativelib

    sdist = _sdist(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAMX_") and k != "CC"}
    env["PIP_CACHE_DIR"] = str(tmp_path / "pip-cache")  # pip's wheel cache, as a user's machine keeps it
    # As from an index: pip caches the wheel it builds from a named, versioned sdist it finds.
    wanted = f"pyamx=={build.read_version()}"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
           "--find-links", str(sdist.parent)]

    def install(*extra, **more_env):
        done = subprocess.run([*pip, *extra, wanted], env=dict(env, **more_env), capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        probe = "import pyamx._buildinfo as b; print(b.EXTENSION)"
        return subprocess.run([str(venv / "bin" / "python"), "-I", "-c", probe], capture_output=True, text=True,
                              timeout=120).stdout.strip()

    assert install(CC="/bin/false") == "False"
    assert install() == "False"  # a compiler now, but the plain reinstall brings the cached pure wheel back
    assert "--no-cache-dir" in _nativelib.REINSTALL_HINT
    assert install("--no-cache-dir") == "True"  # what the advice says


@slow_build
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_downstream_project_installs_pyamx_from_git_and_runs_its_amx_test(tmp_path):
    """docs/downstream.md, step by step: pip install from a git URL, pytest --amx=emulate, pyamx run."""
    src = _scratch_copy(tmp_path)
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "pyamx under test"]):
        subprocess.run(git + command, check=True, capture_output=True, timeout=120)
    project = tmp_path / "downstream"
    (project / "mykernels").mkdir(parents=True)
    (project / "tests").mkdir()
    (project / "mykernels" / "__init__.py").write_text(
        "import numpy as np\nimport pyamx\n\n\n"
        "def dot(a, b):\n"
        "    c = np.zeros((a.shape[0], b.shape[1] // 2), np.float32)\n"
        "    return np.asarray(pyamx.tdpbf16ps(c, a, b))\n")
    (project / "tests" / "test_kernels.py").write_text(
        "import numpy as np\nimport pytest\n\nimport mykernels\n\n\n"
        "@pytest.mark.amx\n"
        "def test_dot_of_ones():\n"
        "    one = np.uint16(0x3F80)  # 1.0 in bf16\n"
        "    a = np.full((2, 4), one, np.uint16)\n"
        "    b = np.full((2, 6), one, np.uint16)\n"
        "    assert (mykernels.dot(a, b) == 4.0).all()  # K = 2 pairs of products of ones\n")
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\npythonpath = [\".\"]\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAMX_")}
    env["PYAMX_REQUIRE_EXTENSION"] = "1"  # as the page advises for CI
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"git+file://{src}", "pytest"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    env.pop("PYAMX_REQUIRE_EXTENSION")
    tests = subprocess.run([str(venv / "bin" / "pytest"), "--amx=emulate", "-q", "-rs"], cwd=project, env=env,
                           capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0 and "1 passed" in tests.stdout, tests.stdout[-3000:] + tests.stderr[-3000:]
    run = subprocess.run([str(venv / "bin" / "pyamx"), "run", "--", "sh", "-c", "exit 7"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 7, run.stderr


@slow_build
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_changed_setting_rebuilds_in_place_and_a_header_edit_too(tmp_path):
    src = _scratch_copy(tmp_path)
    env = dict(os.environ)
    env.pop(build.DISABLE_ENV, None)

    def run(**extra):
        done = subprocess.run([sys.executable, "build.py"], cwd=src, env=dict(env, **extra), capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    def built_with():
        probe = ("import sys; sys.path.insert(0, '.'); from pyamx import _native as n; "
                 "print(n.lib.pyamx_build_kernels(), n.ffi.string(n.lib.pyamx_build_kernels_reason()).decode())")
        return subprocess.run([sys.executable, "-c", probe], cwd=src, capture_output=True, text=True,
                              timeout=120).stdout.strip()

    run()
    before = built_with()
    assert before and not before.endswith(f"{build.DISABLE_ENV}=1 at build time")
    assert "rebuilding" not in run()  # nothing changed: reused
    # each change below lands within a second of the previous build: file times alone would miss it
    assert "rebuilding pyamx._native" in run(**{build.DISABLE_ENV: "1"})
    assert built_with() == f"0 {build.DISABLE_ENV}=1 at build time"
    header = src / "csrc" / "internal.h"
    header.write_text(header.read_text() + "\n/* edited */\n")
    assert "rebuilding pyamx._native" in run(**{build.DISABLE_ENV: "1"})
    assert "rebuilding" not in run(**{build.DISABLE_ENV: "1"})


@slow_build
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_compile_that_fails_after_the_probes_gives_a_pure_wheel_that_says_why(tmp_path):
    src = _scratch_copy(tmp_path)
    cc = tmp_path / "cc-refuses-detect"
    cc.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *detect.c) echo "refusing $a" >&2; exit 1;; esac; done\n'
                  'exec gcc "$@"\n')
    cc.chmod(0o755)
    env = dict(os.environ, CC=str(cc))
    env.pop("PYAMX_REQUIRE_EXTENSION", None)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wh"), str(src)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = os.listdir(tmp_path / "wh")
    assert wheel.endswith("-py3-none-any.whl"), wheel
    with zipfile.ZipFile(tmp_path / "wh" / wheel) as whl:
        assert not any(n.endswith(".so") for n in whl.namelist())
        info = whl.read("pyamx/_buildinfo.py").decode()
    assert "EXTENSION = False" in info and "compiling csrc/detect.c failed" in info
    env["PYAMX_REQUIRE_EXTENSION"] = "1"
    strict = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wh2"),
                             str(src)], env=env, capture_output=True, text=True, timeout=900)
    assert strict.returncode != 0


# -- what `pyamx info` makes of it (pure: detect.evaluate on recorded facts) ----------------------------


def _stage_value(rep, prefix):
    (value,) = [s.value for s in rep.stages if s.name.startswith(prefix)]
    return value


def test_info_says_why_a_module_has_no_kernels():
    from pyamx.cpu.detect import BuildFacts, RawFacts, evaluate

    build_facts = BuildFacts(version="0.1.0", compiler="gcc 10.2.1", kernels=frozenset(), x86_64_linux=True,
                             kernels_reason="the C compiler rejects the AMX target attributes or intrinsics (...)")
    rep = evaluate(RawFacts(system="Linux", machine="x86_64", python=(3, 11, 7), build=build_facts))
    assert _stage_value(rep, "native module").endswith(
        "kernels: none (the C compiler rejects the AMX target attributes or intrinsics (...))")
    assert rep.build["kernels_reason"].startswith("the C compiler rejects")


def test_info_without_the_extension_gives_the_cause_and_the_cpuinfo_flags():
    from pyamx.cpu.detect import RawFacts, evaluate

    cause = "pyamx was built without the C extension because no C compiler was found (gcc: not found); ..."
    rep = evaluate(RawFacts(system="Linux", machine="x86_64", python=(3, 11, 7), build_error=cause,
                            cpuinfo_flags=("amx_tile", "amx_bf16")))
    assert _stage_value(rep, "native module") == cause
    assert _stage_value(rep, "cpu flags (/proc/cpuinfo)") == "amx_tile amx_bf16"
    assert not rep.amx_usable and cause in rep.reason
    none = evaluate(RawFacts(system="Linux", machine="x86_64", python=(3, 11, 7), build_error=cause, cpuinfo_flags=()))
    assert _stage_value(none, "cpu flags (/proc/cpuinfo)") == "no AMX flags"


# -- the test extra: what the trap tests need to compile their kernels ----------------------------


def test_the_test_extra_has_setuptools_which_cffi_compiles_with_on_python_3_12():
    tomllib = pytest.importorskip("tomllib", reason="Python < 3.11 has no tomllib")
    with open(os.path.join(CHECKOUT, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    assert any(req.split(">")[0].split("=")[0].strip() == "setuptools" for req in extra), extra


def test_trap_kernels_without_setuptools_on_3_12_skip_naming_setuptools_first(monkeypatch, tmp_path):
    import importlib.util

    import trap_selftest_build

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "setuptools" else find_spec(name, *a))
    monkeypatch.setattr(sys, "version_info", (3, 12, 0, "final", 0))
    monkeypatch.setattr(trap_selftest_build.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(trap_selftest_build.sys, "platform", "linux")
    ok, why = trap_selftest_build.build(tmp_path)
    assert not ok and why.startswith("cffi needs setuptools") and "pip install setuptools" in why, why
    assert not (tmp_path / "work").exists()  # no compile was tried


# -- documentation a message can point at ----------------------------------------------------------


def test_a_doc_is_found_inside_the_package_first_then_beside_it_else_online(tmp_path):
    from pyamx import _docs

    package = tmp_path / "site" / "pyamx"
    package.mkdir(parents=True)
    assert _docs.doc("run.md", str(package)) == _docs.DOCS_URL + "/run.md"
    (tmp_path / "site" / "docs").mkdir()
    (tmp_path / "site" / "docs" / "run.md").write_text("checkout")
    assert _docs.doc("run.md", str(package)) == str(tmp_path / "site" / "docs" / "run.md")
    (package / "docs").mkdir()
    (package / "docs" / "run.md").write_text("wheel")
    assert _docs.doc("run.md", str(package)) == str(package / "docs" / "run.md")


def test_the_online_docs_address_is_the_one_in_the_metadata():
    tomllib = pytest.importorskip("tomllib", reason="Python < 3.11 has no tomllib")
    from pyamx import _docs

    with open(os.path.join(CHECKOUT, "pyproject.toml"), "rb") as f:
        urls = tomllib.load(f)["project"]["urls"]
    assert urls["Documentation"] == _docs.DOCS_URL


def test_pyamx_run_points_at_a_doc_this_copy_has(tmp_path):
    from pyamx.tools import run

    path = run._run_doc()
    assert os.path.isfile(path) and path.endswith("run.md")


def test_ship_docs_copies_every_doc_into_the_package(tmp_path):
    build.ship_docs(tmp_path)
    shipped = sorted(os.listdir(tmp_path / "pyamx" / "docs"))
    assert shipped == sorted(n for n in os.listdir(os.path.join(CHECKOUT, "docs")) if n.endswith(".md"))
