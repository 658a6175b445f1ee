#!/usr/bin/env python3
"""Reads a run's TensorBoard event files with TensorBoard's own reader and checks them against
the run's metrics.jsonl: every step's loss, lr, grad norm and tokens/s, and each stage's peak.

  tests/tensorboard_check.py OUTPUT_DIR

Exit 77 (ctest: skipped) when the `tensorboard` package is not installed.
"""
import glob
import json
import math
import os
import sys

try:
    from tensorboard.backend.event_processing import event_file_loader
except ImportError:
    print("the tensorboard Python package is not installed: skipped (pip install tensorboard)")
    sys.exit(77)


def main(out_dir):
    files = sorted(glob.glob(os.path.join(out_dir, "tensorboard", "events.out.tfevents.*")))
    if not files:
        sys.exit(f"FAIL: no event file under {out_dir}/tensorboard")
    scalars = {}  # (tag, step) -> value
    versions = []
    for path in files:
        for event in event_file_loader.LegacyEventFileLoader(path).Load():
            if event.file_version:
                versions.append(event.file_version)
            for value in event.summary.value:
                scalars[(value.tag, event.step)] = value.simple_value
    if versions != ["brain.Event:2"] * len(files):
        sys.exit(f"FAIL: file versions {versions}")
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    checked = 0
    for line in lines:
        step = line["step"]
        for key in ("loss", "lr", "grad_norm", "tokens_per_s", "eval_loss"):
            if key not in line:
                continue
            got = scalars.get((key, step))
            want = line[key]
            if got is None or not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-30):
                sys.exit(f"FAIL: step {step} {key}: TensorBoard {got}, metrics.jsonl {want}")
            checked += 1
        for stage, peaks in line["memory_peak"].items():
            got = scalars.get((f"memory_peak/{stage}", step))
            want = peaks["total"] / 2**20
            if got is None or not math.isclose(got, want, rel_tol=1e-6):
                sys.exit(f"FAIL: step {step} memory_peak/{stage}: {got}, want {want}")
            checked += 1
    print(f"TensorBoard's reader agrees with metrics.jsonl: {len(lines)} steps, {checked} values, "
          f"{len(files)} file(s)")


if __name__ == "__main__":
    main(sys.argv[1])
