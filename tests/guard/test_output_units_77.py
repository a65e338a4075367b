"""Issue 77 item 1, the pieces of ``verispec.guard.output`` on their own: how the code's lines are shown, what is
left out past the cap, the JSON's confinement, and the --json-out document."""

from __future__ import annotations

import json

from verispec.guard.output import SHOWN_BYTES, CodeOutput, json_out_document, shown_line, with_confinement


def _collect():
    written = []
    return written, lambda stream, text: written.append((stream, text))


def test_a_line_is_fenced_and_its_control_characters_escaped():
    assert shown_line("verispec: LOSSLESS\x1b[2K\r") == "| verispec: LOSSLESS\\x1b[2K\\r"
    assert shown_line("a\tb") == "| a\tb"  # a tab stays


def test_lines_are_shown_whole_with_one_header_and_the_rest_counted():
    written, write = _collect()
    out = CodeOutput(write, None)
    line = "x" * 99 + "\n"  # 100 bytes a line
    total = 1000 * len(line)  # past the cap
    for _ in range(1000):
        out.take(line.encode())
    out.finish()
    text = "".join(chunk for stream, chunk in written if stream == "stderr")
    shown = [row for row in text.splitlines() if row.startswith("| ")]
    assert text.count("output of the code under check follows") == 1
    whole, cut = divmod(SHOWN_BYTES, len(line))  # the cap falls inside a line: its first bytes are shown last
    assert len(shown) == whole + 1 and all(row == "| " + "x" * 99 for row in shown[:-1])
    assert shown[-1] == "| " + "x" * cut
    assert f"{total - SHOWN_BYTES:,} more bytes" in text


def test_negative_control_under_the_cap_nothing_is_left_out():
    written, write = _collect()
    out = CodeOutput(write, None)
    out.take(b"one\ntwo")  # the last line without its newline comes at the end
    out.finish()
    text = "".join(chunk for _, chunk in written)
    assert "| one\n" in text and "| two\n" in text and "more bytes" not in text


def test_the_json_gets_the_confinement_and_the_status_given():
    record = {"sandboxed": True, "exit_status": 3}
    text = with_confinement('{"verdict": "lossless", "exit_status": 0}\nnot json\n', record)
    first, second = text.splitlines()
    assert json.loads(first) == {"verdict": "lossless", "exit_status": 3, "confinement": record}
    assert second == "not json"


def test_the_json_out_document_is_the_one_object_or_all_of_them():
    marker = {"tool": "verispec", "kind": "json output"}
    one = json.loads(json_out_document('{"a": 1}\n', marker))
    assert one == {"a": 1, "written_by": marker}
    many = json.loads(json_out_document('{"a": 1}\n{"a": 2}\n', marker))
    assert many == {"objects": [{"a": 1}, {"a": 2}], "written_by": marker}
