"""What ``decode_event`` (one JSON event: the HTTP client's replies, the JSONL reader's
per-line path) costs beside msgspec's strict decoding of the same lines.

    python benchmarks/bench_decode_event.py [--events 50000] [--rounds 5] [--quick]

The events of a realistic log (``bench_surface.generate_log``) are encoded one per
line, and split: the lines that hold the text ``-0`` (in a UUID, a date, a number) and
the others. For each group, alternating ``--rounds`` times in this one process, the CPU
time (``time.process_time``) of decoding every line with ``decode_event``, with the
strict decoder alone (``msgspec.json.Decoder(Event)``: the baseline) and with the loose
decoder (``_loose_event``, which keeps an integer ``-0`` of the envelope as ``-0.0``
for the rules to refuse; before 5 December 2026 every line holding ``-0`` took it).
Prints per-line microseconds, medians and the ratios against the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_surface import generate_log

from surfacelog.schema import codec
from surfacelog.schema.events import Event

_STRICT = msgspec.json.Decoder(Event)


def _cpu_per_line(decode: Callable[[bytes], object], lines: Sequence[bytes]) -> float:
    """Microseconds of CPU per line."""
    start = time.process_time()
    for line in lines:
        decode(line)
    return 1e6 * (time.process_time() - start) / max(len(lines), 1)


def _loose(line: bytes) -> object:
    return codec._loose_event(line, "event")


def measure(lines: Sequence[bytes], rounds: int) -> dict[str, Any]:
    """Medians over ``rounds`` alternating rounds: µs per line for each decoder, and
    each one's ratio against the strict decoder."""
    ways: dict[str, Callable[[bytes], object]] = {
        "strict": _STRICT.decode, "decode_event": codec.decode_event, "loose": _loose}
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, decode in ways.items():
            samples[name].append(_cpu_per_line(decode, lines))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {"lines": len(lines), "us_per_line": medians,
            "ratio": {name: medians[name] / medians["strict"]
                      for name in ("decode_event", "loose")}}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a small log, 3 rounds")
    args = parser.parse_args(argv)
    events = min(args.events, 5_000) if args.quick else args.events
    rounds = min(args.rounds, 3) if args.quick else args.rounds
    lines = [codec.encode_event(e) for e in generate_log(events)[0]]
    groups = {"holding -0": [line for line in lines if b"-0" in line],
              "without -0": [line for line in lines if b"-0" not in line]}
    figures: dict[str, Any] = {"events": len(lines)}
    print(f"{len(lines)} events, {rounds} alternating rounds, CPU per line (medians)")
    for group, chosen in groups.items():
        got = measure(chosen, rounds)
        figures[group] = got
        us, ratio = got["us_per_line"], got["ratio"]
        print(f"  {group} ({got['lines']} lines): strict {us['strict']:.2f} us (baseline), "
              f"decode_event {us['decode_event']:.2f} us = {ratio['decode_event']:.2f}x, "
              f"loose {us['loose']:.2f} us = {ratio['loose']:.2f}x")
    return figures


if __name__ == "__main__":
    main()
