"""A tool's output coloured by a terminal: its digest reads the text without the control
sequences, so none is re-sent and no listed value carries their residue."""

from gateway.context.summarize import summarize, without_ansi

# A coloured test run as a harness passes it on (pytest with colour forced): bold paths,
# green passes, a red failure, and an OSC window-title sequence.
_BOLD, _GREEN, _RED, _OFF = "\x1b[1m", "\x1b[32m", "\x1b[31m", "\x1b[0m"
_RUN = "\n".join(
    [f"{_BOLD}tests/test_module_{i}.py{_OFF}::test_case_{i} {_GREEN}PASSED{_OFF}"
     for i in range(40)]
    + [f"\x1b]0;pytest\x07{_BOLD}{_RED}FAILED{_OFF} {_BOLD}tests/test_generator.py{_OFF}"
       "::test_names - AssertionError", f"{_RED}1 failed, 40 passed in 2.31s{_OFF}"])


def test_control_sequences_are_gone_and_the_text_stays():
    plain = without_ansi(_RUN)
    assert "\x1b" not in plain
    assert "tests/test_module_7.py::test_case_7 PASSED" in plain
    assert plain.endswith("1 failed, 40 passed in 2.31s")
    assert without_ansi("no escapes here") == "no escapes here"


def test_a_digest_of_coloured_output_lists_clean_values():
    for level in (1, 2, 3):
        out = summarize(_RUN, "tool_result", level)
        assert "\x1b" not in out
        # the residue of `ESC[1m` glued to a path is not a value of its own
        assert "1mtests/" not in out and "[0m" not in out
    # the aged digest keeps the failure with its path, clean
    assert "FAILED tests/test_generator.py::test_names" in summarize(_RUN, "tool_result", 3)
    # the digest is what the uncoloured output's digest is
    assert summarize(_RUN, "tool_result", 3) == summarize(without_ansi(_RUN), "tool_result", 3)
