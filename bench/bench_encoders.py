"""Encode against decode: values per second of readers/codecs/encoders.py beside readers/codecs/decoders.py.

    .venv/bin/python bench/bench_encoders.py [--case sql_groupby_hashmap_2.3] [--repeat 5] [--rounds 50]

Reads the stored bytes of every ``accState`` value (the GROUP BY accumulator, a RowData of two
BIGINTs) and key (a RowData of one STRING) of a committed fixture savepoint (no Flink needed),
then times, one thread, best of ``--repeat`` runs of ``--rounds`` passes over all of them: the
decoder per value, the encoder per decoded value, and the encoder per value in its Arrow form
(``to_pylist()`` of the state's column, what a SQL edit hands back). Checks first that every
encoding equals the stored bytes. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402

from statecat.readers import SavepointReader  # noqa: E402
from statecat.readers.codecs.arrow_types import arrow_type  # noqa: E402
from statecat.readers.codecs.decoders import build_decoder  # noqa: E402
from statecat.readers.codecs.encoders import build_encoder  # noqa: E402
from statecat.readers.scans.scan import KeyedStateScanner  # noqa: E402
from tests.fixtures.expected import savepoint_dir  # noqa: E402

STATE = "accState"


def stored_parts(case: str) -> dict[str, tuple]:
    """{part: (its type, the stored bytes of each value)} for the key and value of ``accState``."""
    reader = SavepointReader(str(savepoint_dir(case)))
    op, state = reader.find(STATE)
    scanner = KeyedStateScanner(reader.meta, op, state)
    decode_key = build_decoder(state.key_type)
    keys, values = [], []
    for location in state.keyed_locations:
        for key_group, data, file, base in scanner._key_groups(location, None):
            data = bytes(data)
            _, (key_at, _, value_at, value_len) = scanner._locate(key_group, data, location, file, base)
            for kat, vat, vlen in zip(key_at.tolist(), value_at.tolist(), value_len.tolist()):
                start = kat + scanner.prefix
                _, end = decode_key(data, start)
                keys.append(data[start:end])
                values.append(data[vat : vat + vlen])
    return {"value": (state.value, values), "key": (state.key_type, keys)}


def best_rate(run: Callable[[], None], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return count / best


def measure(desc, blobs: list[bytes], rounds: int, repeat: int) -> dict[str, float]:
    decode, encode = build_decoder(desc), build_encoder(desc)
    decoded = [decode(b, 0)[0] for b in blobs]
    arrow = pa.array(decoded, type=arrow_type(desc)).to_pylist()
    for form in (decoded, arrow):
        out = bytearray()
        for value in form:
            encode(value, out)
        assert bytes(out) == b"".join(blobs), "an encoding differs from the stored bytes"

    def decode_all() -> None:
        for _ in range(rounds):
            for data in blobs:
                decode(data, 0)

    def encode_all(values: list) -> Callable[[], None]:
        def run() -> None:
            for _ in range(rounds):
                out = bytearray()
                for value in values:
                    encode(value, out)

        return run

    count = rounds * len(blobs)
    return {
        "decode": best_rate(decode_all, count, repeat),
        "encode": best_rate(encode_all(decoded), count, repeat),
        "encode_arrow_form": best_rate(encode_all(arrow), count, repeat),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="sql_groupby_hashmap_2.3", help="a fixture case with an accState")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure (the best is kept)")
    ap.add_argument("--rounds", type=int, default=50, help="passes over all values per run")
    args = ap.parse_args(argv)
    results = {}
    print(f"{'part':<8} {'type':<28} {'values':>7} {'decode/s':>12} {'encode/s':>12} {'Arrow form/s':>13}")
    for part, (desc, blobs) in stored_parts(args.case).items():
        rates = measure(desc, blobs, args.rounds, args.repeat)
        results[part] = {"type": desc.describe(), "values": len(blobs), **{k: round(v) for k, v in rates.items()}}
        print(
            f"{part:<8} {desc.describe():<28} {len(blobs):>7} {rates['decode']:>12,.0f} "
            f"{rates['encode']:>12,.0f} {rates['encode_arrow_form']:>13,.0f}"
        )
    print(json.dumps({"case": args.case, "state": STATE, "rounds": args.rounds, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
