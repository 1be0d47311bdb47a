"""Draws docs/fleet.png from target/fleet.csv (written by `cargo bench --bench fleet`).

Needs matplotlib (`pip install matplotlib`).
"""

import csv
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = pathlib.Path(__file__).resolve().parent.parent
rows = list(csv.DictReader(open(root / "target" / "fleet.csv")))
second = [int(r["second"]) for r in rows]

fig, (rate, workers, gap) = plt.subplots(3, 1, sharex=True, figsize=(9, 8))
rate.plot(second, [int(r["produced"]) for r in rows], label="produced")
rate.plot(second, [int(r["handled"]) for r in rows], label="handled")
rate.set_ylabel("records / s")
rate.legend(loc="upper left")
rate.set_title("A shard-worker fleet: 16 shards, 20 s invocations, 2 ms per record")
workers.step(second, [int(r["workers"]) for r in rows], where="post", color="tab:green")
workers.set_ylabel("workers running")
gap.plot(second, [int(r["longest_wait_ms"]) for r in rows], color="tab:orange", label="longest wait of a record")
gap.plot(second, [int(r["longest_hand_over_gap_ms"]) for r in rows], color="tab:red", label="longest hand-over gap")
gap.axhline(1000, color="grey", linestyle="--", label="renew interval")
gap.set_ylabel("ms")
gap.set_xlabel("seconds")
gap.legend(loc="upper left")
fig.tight_layout()
fig.savefig(root / "docs" / "fleet.png", dpi=100)
print("wrote", root / "docs" / "fleet.png")
