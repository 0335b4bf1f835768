"""The one parser of pyamx's ``PYAMX_*`` environment variables.

Rules, the same for every variable:

* an empty value means unset (CPython's convention for ``PYTHON*``
  variables: ``VAR= cmd`` is how a shell user unsets one for a command);
* a value outside the allowed set is an error naming the variable, the
  value and the allowed values: a typo must never silently pick a default;
* booleans accept ``1/0``, ``true/false`` and ``yes/no`` in any case
  (build.py's settings parse through here too); names (``PYAMX_BACKEND=native``) are spelled exactly as the
  matching Python argument (``backend="native"``), so both accept the same;
* nothing is stripped: ``" 1"`` is a typo, not ``1``.

Importing this module must not read the environment or fail, so callers
decide when a bad value becomes an error (``import pyamx`` never raises
because of one; the first use of the setting does).

Standard library only, with no relative imports: ``build.py`` runs before
pyamx (or numpy, or cffi) is importable and loads this file by path::

    spec = importlib.util.spec_from_file_location("pyamx_env", "pyamx/_env.py")
    env = importlib.util.module_from_spec(spec); spec.loader.exec_module(env)
    env.flag("PYAMX_DISABLE_AMX_KERNELS")
"""

from __future__ import annotations

import os

# typing.TYPE_CHECKING without importing typing: build.py and `pyamx run` load this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    #: what a caller raises for a bad value: ``error(name, value, allowed)``
    ErrorFactory = Callable[[str, str, str], Exception]

TRUE = ("1", "true", "yes")
FALSE = ("0", "false", "no")

#: every variable pyamx reads, with what it does (shown by ``pyamx info``)
VARIABLES = {
    "PYAMX_BACKEND": "process default backend: auto, native or emulator",
    "PYAMX_ENGINE": "arithmetic engine of the emulator backend: auto, avx512, avx2, portable or numpy",
    "PYAMX_ENGINE_THREADS": "integer >= 1: worker threads of the compiled engines and of large array conversions",
    "PYAMX_MATMUL_MEMORY_CHECK": "boolean: refuse a matmul that needs more memory than is available (default on)",
    "PYAMX_TRAP_EMULATION": "boolean: run the native code through the SIGILL trap-and-emulate mode",
    "PYAMX_REQUIRE_NATIVE": "boolean (tests): fail, not skip, the tests that need the native backend",
    "PYAMX_DISABLE_AMX_KERNELS": "boolean (build): build the extension without AMX kernels",
    "PYAMX_REQUIRE_EXTENSION": "boolean (build): fail the install when the C extension cannot be built",
    "PYAMX_CROSSCHECK_SEQUENCES": "integer (tests): random sequences of the native-vs-emulator cross-check",
    "PYAMX_CROSSCHECK_SEED": "integer (tests): seed of the cross-check",
}

#: the one thread bound two layers read (the compiled engines and the array conversions), named here,
#: below both: neither can import the other's constant without an import circle
ENGINE_THREADS = "PYAMX_ENGINE_THREADS"


class EnvVarError(ValueError):
    """A ``PYAMX_*`` variable holds a value pyamx does not accept; the message says which are."""

    def __init__(self, name: str, value: str, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"the environment variable {name}={value!r} is not understood; allowed: {allowed}")


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of ``name``, or None when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(name)
    return value if value else None


def flag(name: str, default: bool = False, *, error: ErrorFactory = EnvVarError,
         environ: Mapping[str, str] | None = None) -> bool:
    """A boolean variable; ``error(name, value, allowed)`` is raised for anything else."""
    value = raw(name, environ)
    if value is None:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise error(name, value, "1/0, true/false, yes/no (any case), or empty/unset for "
                f"the default ({'on' if default else 'off'})")


def choice(name: str, allowed: Collection[str], default: str, *, error: ErrorFactory = EnvVarError,
           environ: Mapping[str, str] | None = None) -> str:
    """One of ``allowed``, spelled exactly; ``default`` when unset or empty."""
    value = raw(name, environ)
    if value is None:
        return default
    if value in allowed:
        return value
    raise error(name, value, f"{', '.join(allowed)}, or empty/unset for {default}")


def integer(name: str, default: int, *, minimum: int = 0, error: ErrorFactory = EnvVarError,
            environ: Mapping[str, str] | None = None) -> int:
    """A decimal integer >= ``minimum``; ``default`` when unset or empty."""
    value = raw(name, environ)
    if value is None:
        return default
    if value.isascii() and value.isdigit() and int(value) >= minimum:  # no sign, no spaces, no underscores
        return int(value)
    raise error(name, value, f"a decimal integer >= {minimum}, or empty/unset for {default}")
