"""A digest's value list names the files an output names by absolute path
(`summarize._absolute_files`, `summarize._named_path`): a compiler's
`/home/u/proj/src/tensor_adapter.c:165:26: error: …` and a sub-agent's report's
``**File: `/home/u/proj/docs/papers/src/sections/stacking.tex`**`` name the file the agent
opens next. The list ranked them behind a build's object files and the report's words, and
read a path of 40 letters, digits and `/` in a row (`home/u/proj/docs/papers/src/sections/
stacking`) as an encoded blob, never listed (Claude Code, bench/README.md, "Session 72,
cc72")."""

from __future__ import annotations

from gateway.context.summarize import summarize

ROOT = "/home/kenth/proj"


def build_log() -> str:
    """A `make` run: errors in five source files, then many object files built."""
    errors = []
    for name, line in (("kron", 12), ("unified", 79), ("io", 40), ("tensor_adapter", 165),
                       ("conv", 7)):
        errors += [f"{ROOT}/src/{name}.c: In function ‘{name}_init’:",
                   f"{ROOT}/src/{name}.c:{line}:26: error: request for member ‘shape’",
                   f"  {line} |     memcpy(t->shape, shape, rank);",
                   "      |                ^~"]
    built = [f"[{k:3d}%] Building C object CMakeFiles/proj_static.dir/src/part_{k:02d}.c.o"
             for k in range(60)]
    return "\n".join(["-- Configuring done", *errors, *built, "make: *** [all] Error 2"])


def report() -> str:
    """A sub-agent's final answer: the files it found, by absolute path, in bold code."""
    sections = f"{ROOT}/docs/papers/src/sections"
    parts = [f"Based on my search through all .tex files in `{sections}/`, here is what I found:"]
    for name in ("stacking", "applications", "foundations"):
        parts += ["", f"**File: `{sections}/{name}.tex`**"]
        parts += [f"- **Line {k}:** `\\Sigma_k(A^{{(1)}}, \\ldots)` should use `\\Stack_{k}` "
                  f"with wrapped operator notation circ longrightarrow omega_{k}"
                  for k in range(10, 16)]
    parts += ["", "The search focused on notation inside equations, as requested."]
    return "\n".join(parts)


def listed(out: str) -> str:
    line = out.splitlines()[-1]
    assert line.startswith("[omitted text mentions:")
    return line


def test_a_build_logs_digest_lists_the_files_its_errors_name() -> None:
    text = build_log()
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text)
    line = listed(out)
    assert f" {ROOT}/src/tensor_adapter.c " in line  # whole, with its leading `/`
    assert f" {ROOT}/src/io.c " in line


def test_a_reports_digest_lists_the_files_it_names_by_long_absolute_path() -> None:
    text = report()
    out = summarize(text, "tool_result", 3, focus=frozenset({"wrapped", "circ", "omega"}))
    assert len(out) < len(text)
    line = listed(out)
    for name in ("stacking", "applications", "foundations"):
        assert f" {ROOT}/docs/papers/src/sections/{name}.tex" in line


def test_a_blob_is_still_not_listed() -> None:
    # a run of 40+ letters and `/` that is not a path of names stays out of the list
    blob = "Qm9vay9yZWFkZXIvY2hhcHRlcjEyMzQ1Njc4OTAxMjM0NTY3ODkwYWJj"
    lines = [f"wrote /srv/run_{k:03d}/out_{k:03d}.csv" for k in range(40)]
    text = "\n".join([*lines[:20], f"token /{blob}/x.bin written", *lines[20:]])
    line = listed(summarize(text, "tool_result", 3))
    assert blob not in line and " /srv/run_038/out_038.csv " in line
