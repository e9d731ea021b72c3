"""``decode_event`` reads a line that holds the text ``-0`` exactly as the loose decoder
reads it (an envelope integer written ``-0`` kept as ``-0.0`` for the rules to refuse),
while taking the strict decoder's path when no envelope integer can have been one; the
JSONL reader's per-line path reads every such line as ``decode_event`` does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from surfacelog.schema import codec
from surfacelog.schema.dsh import ReadNotes
from surfacelog.schema.errors import DecodeError

_INT = st.sampled_from(["0", "-0", "7", "-3", "10", "-01", "1e400", "0.0", "-0.0"])
_TEXT = st.sampled_from(["plain", "2026-01-05", "f280e440-0914-4d70", "-0", "a-0b", ""])


@st.composite
def _lines(draw: st.DrawFn) -> bytes:
    """One event line: envelope integers that may be written -0 (or 0, or not integers
    at all), strings and data that may hold the text -0, sometimes cut short."""
    fields = [f'"type":"x/{draw(_TEXT)}"', f'"seq":{draw(_INT)}', f'"time":{draw(_INT)}']
    data = draw(st.sampled_from([
        "{}", '{"v":-0}', f'{{"id":"{draw(_TEXT)}","n":{draw(_INT)}}}', f'[{draw(_INT)}]']))
    fields.append(f'"data":{data}')
    if draw(st.booleans()):
        fields.append(f'"sourceEventSeqs":[{draw(_INT)},{draw(_INT)}]')
    if draw(st.booleans()):
        fields.append(f'"surfaceOp":{{"op":"replace","start":{draw(_INT)},'
                      f'"end":{draw(_INT)}}}')
    line = ("{" + ",".join(draw(st.permutations(fields))) + "}").encode()
    cut = draw(st.integers(0, len(line)))
    return line if draw(st.booleans()) else line[:cut]


def _outcome(read: Callable[[], codec.Event]) -> tuple[str, ...]:
    try:
        event = read()
    except DecodeError as exc:
        return ("error", type(exc).__name__, exc.rule, str(exc))
    return ("ok", repr(event))


@given(_lines())
# A line cut short inside a key the two decoders type differently: found by a CI run.
@example(b'{"seq":-0,"data":[-0.0],"time":-')
def test_a_line_holding_minus_zero_reads_as_the_loose_decoder_reads_it(line: bytes) -> None:
    got = _outcome(lambda: codec.decode_event(line, "line 3"))
    if b"-0" in line:
        assert got == _outcome(lambda: codec._loose_event(line, "line 3"))
    elif got[0] == "ok":
        assert "-0.0" not in got[1]
    # The JSONL reader's per-line path answers the same (its own try of the strict
    # decoder, then the same mechanism).
    assert _outcome(lambda: codec._line_events(3, line, "line", ReadNotes())[0]) == got


def test_minus_zero_in_the_envelope_stays_minus_zero_and_in_text_takes_the_strict_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    event = codec.decode_event(b'{"type":"x/y","seq":-0,"time":5,"data":{}}')
    assert repr(event.seq) == "-0.0"
    event = codec.decode_event(
        b'{"type":"x/y","seq":4,"time":5,"sourceEventSeqs":[-0],"data":{}}')
    assert repr(event.source_event_seqs) == "(-0.0,)"
    # A UUID holding "-0" and a -0 inside data: the strict decoder's event, the data's
    # -0 read as 0 on both paths.
    calls = 0
    loose = codec._loose_event

    def counting(line: bytes, where: str) -> object:
        nonlocal calls
        calls += 1
        return loose(line, where)

    monkeypatch.setattr(codec, "_loose_event", counting)
    event = codec.decode_event(
        b'{"type":"x/y","seq":4,"time":5,"data":{"id":"f280e440-0914","v":-0}}')
    assert calls == 0
    assert event.data == {"id": "f280e440-0914", "v": 0} and event.seq == 4
