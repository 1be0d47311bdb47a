"""Powertools for AWS Lambda (Python)'s AsyncBatchProcessor on a Kinesis
event, with a handler that awaits 3 to 7 ms a record: what the
concurrency benchmark (benches/concurrency.rs) runs beside shardkeeper.

Usage: python3 powertools_async.py EVENT_FILE ROUNDS
The handler waits 3 to 7 ms for record n (3 + (7n + n // 100) mod 5), as the
Rust side.
Prints one JSON line: the median milliseconds of the rounds, and how many
partition keys saw their records complete out of order (AsyncBatchProcessor
runs every record of the batch at once and keeps no order).
"""

import asyncio
import json
import statistics
import sys
import time

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)

event = json.load(open(sys.argv[1]))
rounds = int(sys.argv[2])
processor = AsyncBatchProcessor(event_type=EventType.KinesisDataStreams)
completed = []


async def record_handler(record):
    payload = record.kinesis.data_as_json()
    await asyncio.sleep((3 + (payload["n"] * 7 + payload["n"] // 100) % 5) / 1000.0)
    completed.append((record.kinesis.partition_key, payload["n"]))


times = []
out_of_order = 0
for _ in range(rounds):
    completed.clear()
    started = time.perf_counter()
    response = async_process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=None
    )
    times.append((time.perf_counter() - started) * 1000.0)
    assert response == {"batchItemFailures": []}, response
    last = {}
    broken = set()
    for key, n in completed:
        if key in last and n < last[key]:
            broken.add(key)
        last[key] = n
    out_of_order = max(out_of_order, len(broken))
print(json.dumps({"median_ms": statistics.median(times), "keys_out_of_order": out_of_order}))
