"""csrc/trap and csrc/preload in parts (docs/trap.md, "The parts"): a folder each, behind one public header.

Every #include and every call from one part into another goes down ORDER, so no two parts form a circle
and a part can be changed by reading the headers of the parts below it only. A part's other headers
(``internal.h``, ``fp32.h``, ``listener.h``) are its own: no other part includes them. Read from the
source text (no compiler), so it holds on every machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
TRAP = CSRC / "trap"
PRELOAD = CSRC / "preload"
#: bottom to top: a part may include and call only the parts before it (the preload is the top, a
#: library that nothing includes, so it has no public header)
ORDER = ("base", "isa", "state", "frames", "handler", "guard", "preload")
#: the module's cffi API (pyamx_trap_*), which every part may include
API = TRAP / "trap.h"

pytestmark = [
    pytest.mark.static,
    pytest.mark.skipif(not TRAP.is_dir(), reason="csrc/ is not beside the tests (installed elsewhere)"),
]


def _sources() -> list:
    return sorted(p for d in (TRAP, PRELOAD) for p in d.rglob("*") if p.suffix in (".c", ".h"))


def _part(path: Path):
    """The part a file belongs to: its folder under csrc/trap, or the preload; None for a file in no part."""
    if path.parent == PRELOAD:
        return "preload"
    if path.parent.parent == TRAP:
        return path.parent.name
    return None


def _public_header(part: str) -> Path:
    return TRAP / part / f"{part}.h"


def _code(path: Path) -> str:
    """The file without its comments (string literals stay: the handler's assembly calls by name in them)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _without_strings(code: str) -> str:
    return re.sub(r'"(?:\\.|[^"\\\n])*"' + r"|'(?:\\.|[^'\\\n])*'", '""', code)


def _includes(path: Path) -> list:
    """The project headers path includes, resolved as the compiler does (its own folder, then -I csrc/trap, csrc)."""
    found = []
    for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', _code(path), flags=re.M):
        for base in (path.parent, TRAP, CSRC):
            target = (base / name).resolve()
            if target.exists():
                found.append((name, target))
                break
        else:
            pytest.fail(f"{path.relative_to(ROOT)} includes {name!r}, which is nowhere")
    return found


def _definitions(path: Path) -> set:
    """The functions path defines with external linkage (C bodies at file scope, and assembly .globl labels)."""
    code = _code(path)
    names = set(re.findall(r"\.globl\s+(\w+)", code))
    flat = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", _without_strings(code), flags=re.M)  # no preprocessor lines
    depth, head = 0, []
    for ch in flat:
        if ch == "{":
            if depth == 0:
                text = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", "".join(head), flags=re.S)
                before, paren, _ = text.partition("(")
                words = re.findall(r"\w+", before)
                if paren and "=" not in before and words and "static" not in words:
                    names.add(words[-1])
            depth += 1
        elif ch == "}":
            depth -= 1
            head = []
        elif depth == 0:
            head = [] if ch == ";" else head + [ch]
    return names


def _declared_in_headers() -> set:
    """Names declared in the trap's and the preload's headers: what a file may call in another. The preload's
    interposers of libc functions (sigaction, pthread_create, ...) are declared by libc, never here."""
    declared = set()
    for header in _sources():
        if header.suffix == ".h":
            declared.update(re.findall(r"\b(\w+)\s*\(", _without_strings(_code(header))))
    return declared


def _where_defined() -> dict:
    declared = _declared_in_headers()
    where: dict = {}
    for source in _sources():
        if source.suffix == ".c":
            for name in _definitions(source) & declared:
                where.setdefault(name, []).append(source)
    return where


def _below(lower: str, upper: str) -> bool:
    return lower in ORDER and upper in ORDER and ORDER.index(lower) < ORDER.index(upper)


def test_every_file_lies_in_a_part_with_one_public_header():
    strays = [p.relative_to(ROOT).as_posix() for p in _sources() if p != API and _part(p) not in ORDER]
    assert not strays, f"in no part of {ORDER} (docs/trap.md, 'The parts'): {' '.join(strays)}"
    missing = [part for part in ORDER if part != "preload" and not _public_header(part).exists()]
    assert not missing, f"parts without their public header <part>/<part>.h: {missing}"


def test_includes_go_down_the_order_and_only_to_public_headers():
    wrong = []
    for source in _sources():
        part = _part(source)
        for name, target in _includes(source):
            if not target.is_relative_to(TRAP) and not target.is_relative_to(PRELOAD):
                continue  # csrc's headers shared with pyamx._native (cpu_features.h, the generated table)
            other = _part(target)
            where = f"{source.relative_to(ROOT)} includes {name}"
            if target == API or other == part:
                continue
            if not _below(other, part):
                wrong.append(f"{where}: {other} is not below {part} in {ORDER} (a circle between parts)")
            elif target != _public_header(other):
                wrong.append(f"{where}: a private header of {other}; include {other}/{other}.h")
    assert not wrong, "\n".join(wrong)


def test_calls_between_parts_go_down_the_order():
    where = _where_defined()
    twice = {name: [p.relative_to(ROOT).as_posix() for p in files] for name, files in where.items() if len(files) > 1}
    assert not twice, f"defined in more than one file: {twice}"
    defined_in = {name: files[0] for name, files in where.items()}
    wrong = []
    for source in _sources():
        if source.suffix != ".c":
            continue
        part = _part(source)
        used = set(re.findall(r"\b\w+\b", _code(source)))
        for name in sorted(used & defined_in.keys()):
            other = _part(defined_in[name])
            if other != part and not _below(other, part):
                wrong.append(f"{source.relative_to(ROOT)} ({part}) uses {name} of "
                             f"{defined_in[name].relative_to(ROOT)} ({other}): not below it in {ORDER}")
    assert not wrong, "calls up the order (a circle between parts):\n" + "\n".join(wrong)


def test_the_checks_see_the_calls_they_guard():
    # The readers above must find the definitions and the calls they check, or the tests pass vacuously.
    where = _where_defined()
    for name, part in (("trap_execute", "isa"), ("state_current", "state"), ("hframes_at_trap", "frames"),
                       ("chain_get", "handler"), ("trap_handler", "handler"), ("xcomp_notified", "guard"),
                       ("pyamx_trap_decode", "isa"), ("m_emit", "base")):
        assert [_part(p) for p in where.get(name, [])] == [part], (name, where.get(name))
    assert "sigaction" not in where  # the preload's interposer of libc's sigaction is no part's function
    handler = _code(TRAP / "handler" / "sigill_handler.c")
    assert re.search(r"\bhframes_at_trap\s*\(", handler) and re.search(r"\btrap_execute\s*\(", handler)


def test_docs_state_the_order():
    doc = (ROOT / "docs" / "trap.md").read_text(encoding="utf-8")
    assert " <- ".join(ORDER) in doc, "docs/trap.md's 'The parts' must state the order this test checks"
