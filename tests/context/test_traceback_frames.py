"""A digest's value list ranks the files an output names by absolute path first
(`summarize._absolute_files`), but not a Python traceback's library frames: a
`File "/usr/local/lib/python3.9/site-packages/pandas/core/frame.py", line 3805, in get_loc`
is code the call went through, not a file the agent opens. Ranked first, DA-Code's library
frames pushed the names its lists kept out and long paths in (runs' cost @0.1 −0.110 ·
−0.138; bench/README.md, "Session 73, dac73"). The script the agent ran, the frame
`in <module>`, still ranks first."""

from __future__ import annotations

from gateway.context.summarize import summarize

LIB = "/usr/local/lib/python3.9/site-packages"


def traceback() -> str:
    """A script's run: a few lines printed, then a traceback through pandas and sklearn."""
    frames = [("/workspace/./train_model.py", 41, "<module>", "model.fit(X_train, y_train)")]
    frames += [(f"{LIB}/{path}", line, name, code) for path, line, name, code in (
        ("sklearn/ensemble/_forest.py", 363, "fit", "X, y = self._validate_data("),
        ("sklearn/base.py", 650, "_validate_data", "X, y = check_X_y(X, y, **check_params)"),
        ("sklearn/utils/validation.py", 1263, "check_X_y", "X = check_array("),
        ("sklearn/utils/validation.py", 997, "check_array", "array = _asarray_with_order("),
        ("sklearn/utils/_array_api.py", 521, "_asarray_with_order", "array = np.asarray("),
        ("pandas/core/generic.py", 2153, "__array__", "arr = np.asarray(values, dtype=dtype)"),
    )]
    printed = [f"feature_{k:02d} mean_{k:02d}=0.{k:03d} std_scaled_{k:02d}" for k in range(30)]
    lines = ["Loaded train_clean.csv with 8214 rows", *printed,
             "Traceback (most recent call last):"]
    for path, line, name, code in frames:
        lines += [f'  File "{path}", line {line}, in {name}', f"    {code}"]
    lines.append("ValueError: could not convert string to float: 'Female'")
    return "\n".join(lines)


def listed(out: str) -> str:
    line = out.splitlines()[-1]
    assert line.startswith("[omitted text mentions:")
    return line


def test_a_tracebacks_library_frames_do_not_rank_first() -> None:
    text = traceback()
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text)
    names = listed(out).removeprefix("[omitted text mentions: ").split()
    assert names[0] == "/workspace/./train_model.py"  # the script the agent ran, first
    # then the innermost frames' names and files as they come, nearest the end first
    assert names[1:4] == ["__array__", f"{LIB}/pandas/core/generic.py", "np.asarray"]
    assert f"{LIB}/sklearn/ensemble/_forest.py" not in names  # an outer frame: past the cap
