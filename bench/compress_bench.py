#!/usr/bin/env python3
"""compress_bench: what fewer bits and fewer weights cost gpt-small-cpu (bench/README.md).

Trains configs/gpt-small-cpu.yaml the same steps (2 stages, real processes) with f32 and with
8-bit optimizer state, dense and pruned (50% unstructured, 2:4) at half-way, then makes the dense
checkpoint INT8 (`baton compress --int8`). Prints per variant: optimizer-state bytes (ledger peak,
both stages), the final checkpoint's bytes, tokens/s, the mean of the last 10 train losses and
the held-out eval loss; beside the seed's claims.

Checks (exit 1 if one fails): every loss finite; the pruned runs' checkpoints hold exactly half
zeros per matrix (compress's report of the stored masks says 50.00%) and are smaller than the
dense one; INT8's eval loss within 1% of the dense model's.

usage: bench/compress_bench.py BATON [--steps N] [--json FILE]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs",
                      "gpt-small-cpu.yaml")
HELD_OUT = ["--set", "data.eval_fraction=0.05", "--set", "train.eval_batches=4"]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"compress_bench: {' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout + result.stderr


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path)
               for f in files)


def final_step_dir(out):
    with open(os.path.join(out, "checkpoints", "latest")) as f:
        return os.path.join(out, "checkpoints", f.read().strip())


def train(baton, work, name, steps, extra):
    out = os.path.join(work, name)
    report = os.path.join(out, "report.json")
    run([baton, "run", CONFIG, "--set", f"train.steps={steps}", "--set", "parallel.stages=2",
         "--set", f"train.eval_every={steps}", "--set", f"output.dir={out}", "--report", report,
         "--log-level", "warn"] + HELD_OUT + extra)
    with open(report) as f:
        r = json.load(f)
    losses = [s["loss"] for s in r["steps"]]
    evals = [s["eval_loss"] for s in r["steps"] if "eval_loss" in s]
    return {
        "name": name,
        "out": out,
        "optimizer_bytes": sum(s["memory"]["peak"]["optimizer"] for s in r["stages"]),
        "checkpoint_bytes": dir_bytes(final_step_dir(out)),
        "tokens_per_s": r["tokens_per_s"],
        "train_loss": sum(losses[-10:]) / len(losses[-10:]),
        "eval_loss": evals[-1],
        "losses": losses,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("baton")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()
    steps, half = args.steps, args.steps // 2
    failures = []
    with tempfile.TemporaryDirectory(prefix="baton_compress_bench.") as work:
        rows = [
            train(args.baton, work, "dense, f32 state", steps, []),
            train(args.baton, work, "dense, int8 state", steps, ["--set", "optimizer.state=int8"]),
            train(args.baton, work, "50% unstructured", steps,
                  ["--set", f"prune.at_step={half}"]),
            train(args.baton, work, "2:4", steps,
                  ["--set", f"prune.at_step={half}", "--set", "prune.pattern=2:4"]),
        ]
        dense = rows[0]
        int8_out = os.path.join(work, "int8")
        text = run([args.baton, "compress", dense["out"], int8_out, "--int8", "--log-level",
                    "warn"] + HELD_OUT)
        eval_match = re.search(r"eval loss: ([0-9.]+) -> ([0-9.]+)", text)
        bytes_match = re.search(r"INT8 weights: \d+ matrices, (\d+) -> (\d+) bytes", text)
        if not eval_match or not bytes_match:
            sys.exit(f"compress_bench: unexpected compress output:\n{text}")
        rows.append({
            "name": "INT8 export of dense",
            "optimizer_bytes": 0,
            "checkpoint_bytes": dir_bytes(final_step_dir(int8_out)),
            "tokens_per_s": float("nan"),
            "train_loss": float("nan"),
            "eval_loss": float(eval_match.group(2)),
            "weight_ratio": int(bytes_match.group(2)) / int(bytes_match.group(1)),
        })
        for row in rows[2:4]:
            # The stored masks, counted by compress (it reads the masks and prunes nothing more).
            check = run([args.baton, "compress", row["out"], os.path.join(work, "check-" +
                         row["name"].replace(" ", "_").replace(":", "of").replace("%", "")),
                         "--prune", "0.5", "--pattern",
                         "2:4" if row["name"] == "2:4" else "unstructured", "--no-eval",
                         "--log-level", "warn"])
            if "50.00% zeros" not in check:
                failures.append(f"{row['name']}: not exactly half zeros: {check.strip()}")
            if row["checkpoint_bytes"] >= dense["checkpoint_bytes"]:
                failures.append(f"{row['name']}: the sparse checkpoint is not smaller")
        for row in rows:
            for key in ("train_loss", "eval_loss"):
                if row["name"] != "INT8 export of dense" or key == "eval_loss":
                    if not math.isfinite(row[key]):
                        failures.append(f"{row['name']}: {key} is not finite")
        if abs(rows[-1]["eval_loss"] - dense["eval_loss"]) / dense["eval_loss"] > 0.01:
            failures.append("INT8 eval loss is not within 1% of the dense model's")

    print(f"gpt-small-cpu, {steps} steps, 2 stages, fp32; pruning at step {half}; "
          f"load average {open('/proc/loadavg').read().split()[0]}")
    print("| variant | optimizer bytes | × | checkpoint bytes | × | tokens/s | train loss (last 10) "
          "| eval loss | eval Δ |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        tps = "—" if math.isnan(row["tokens_per_s"]) else f"{row['tokens_per_s']:.0f}"
        train_loss = "—" if math.isnan(row["train_loss"]) else f"{row['train_loss']:.4f}"
        print(f"| {row['name']} | {row['optimizer_bytes']:,} | "
              f"{row['optimizer_bytes'] / dense['optimizer_bytes']:.3f} | "
              f"{row['checkpoint_bytes']:,} | "
              f"{row['checkpoint_bytes'] / dense['checkpoint_bytes']:.3f} | {tps} | {train_loss} | "
              f"{row['eval_loss']:.4f} | "
              f"{100 * (row['eval_loss'] - dense['eval_loss']) / dense['eval_loss']:+.2f}% |")
    print(f"INT8 block weights: {rows[-1]['weight_ratio']:.4f}x of fp32 "
          "(the seed: a quarter of the bytes, < 0.5% worse)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "out"} for r in rows], f, indent=1)
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
