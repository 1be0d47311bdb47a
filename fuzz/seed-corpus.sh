#!/usr/bin/env bash
# Writes the seed corpus of every fuzz target (corpus/<target>/seed-*) from
# the sample events in ../events. Idempotent: the seeds are rewritten, the
# rest of a grown corpus is left alone. Needs python3.
set -euo pipefail
cd "$(dirname "$0")"

python3 - ../events corpus <<'PY'
import base64, hashlib, json, pathlib, sys

events, corpus = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
MAGIC, DIGEST_LEN = bytes([0xF3, 0x89, 0x9A, 0xC2]), 16

# Targets that start from another's seeds: kinesis_record from the KPL
# payloads, ddb_sdk_image from the stream records. (The seeds of
# state_item, kcl_item and positions_file are written by hand and
# committed.)
ALSO = {"kpl_deaggregate": "kinesis_record", "ddb_stream_image": "ddb_sdk_image"}

def write(target, name, data):
    if target in ALSO and not name.startswith("event"):
        write_one(ALSO[target], name, data)
    write_one(target, name, data)

def write_one(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}").write_bytes(data if isinstance(data, bytes) else data.encode())

def load(name):
    return json.loads((events / name).read_text())

kinesis = ["kinesis-batch.json", "kinesis-kpl.json", "kinesis-malformed.json", "kinesis-window.json"]
sequences = []

# kinesis_event: each sample event as it is.
for name in kinesis:
    write("kinesis_event", name, (events / name).read_bytes())
    for r in load(name)["Records"]:
        seq = r.get("kinesis", {}).get("sequenceNumber")
        if isinstance(seq, str):
            sequences.append(seq)

# A window event that carries state, and the final invoke of a window.
window = load("kinesis-window.json")
window["state"] = {"shardkeeper": "41"}
write("kinesis_event", "window-state.json", json.dumps(window, indent=1))
window["isFinalInvokeForWindow"] = True
write("kinesis_event", "window-final.json", json.dumps(window, indent=1))

# kpl_deaggregate: every distinct record payload; for an aggregate with a
# valid digest also its bare protobuf body, which the target frames itself.
payloads = {}
for name in kinesis:
    for r in load(name)["Records"]:
        try:
            data = base64.b64decode(r["kinesis"]["data"], validate=True)
        except Exception:
            continue
        payloads.setdefault(hashlib.sha1(data).hexdigest()[:12], data)
for key, data in sorted(payloads.items()):
    if data[:4] != MAGIC:
        continue
    write("kpl_deaggregate", f"{key}.bin", data)
    body = data[4:-DIGEST_LEN]
    if hashlib.md5(body).digest() == data[-DIGEST_LEN:]:
        write("kpl_deaggregate", f"{key}-body.bin", body)
write("kpl_deaggregate", "plain.bin", b'{"order_id": "o-1"}')

# One aggregate the samples lack: explicit hash keys, a tag (an unknown
# field to skip) and an empty payload.
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))

def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload

def record(pk, ehk, data, tag=b""):
    out = varint(1 << 3) + varint(pk)
    if ehk is not None:
        out += varint(2 << 3) + varint(ehk)
    out += field(3, data)
    if tag:
        out += field(4, field(1, tag) + field(2, b"v"))
    return out

body = (field(1, b"c-1") + field(1, b"c-2") + field(2, b"340282366920938463463374607431768211455")
        + field(3, record(0, 0, b'{"order_id": "o-1"}', tag=b"k"))
        + field(3, record(1, None, b""))
        + field(3, record(0, 0, b"\x00\xff")))
write("kpl_deaggregate", "hash-keys-body.bin", body)
write("kpl_deaggregate", "hash-keys.bin", MAGIC + body + hashlib.md5(body).digest())

# ddb_stream_image: the event, and each of its records alone.
ddb = load("dynamodb-stream.json")
write("ddb_stream_image", "event.json", (events / "dynamodb-stream.json").read_bytes())
for i, r in enumerate(ddb["Records"]):
    write("ddb_stream_image", f"record-{i}.json", json.dumps(r, indent=1))
    seq = r.get("dynamodb", {}).get("SequenceNumber")
    if isinstance(seq, str):
        sequences.append(seq)

# sequence_number: consecutive pairs of the events' sequence numbers, the
# limits, and each checkpoint form.
seen = list(dict.fromkeys(sequences))
for i, (a, b) in enumerate(zip(seen, seen[1:] + seen[:1])):
    write("sequence_number", f"pair-{i}.txt", f"{a}\n{b}")
last = seen[0]
for name, text in {
    "zero.txt": "0\n000",
    "limit.txt": "9" * 129 + "\n" + "1" + "0" * 129,
    "leading-zeros.txt": "0" * 40 + last + "\n" + last,
    "trim-horizon.txt": f"TRIM_HORIZON\n{last}",
    "latest.txt": "LATEST\nSHARD_END",
    "at-timestamp.txt": f"AT_TIMESTAMP:1763701200123\nAT_SEQUENCE_NUMBER:{last}",
    "sub-sequence.txt": f"{last}/2\n{last}/10",
}.items():
    write("sequence_number", name, text)
PY

for d in corpus/*/; do
    printf '%s: %s seeds\n' "$(basename "$d")" "$(find "$d" -name 'seed-*' | wc -l)"
done
