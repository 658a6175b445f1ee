#!/usr/bin/env python3
"""parallel_bench: pipeline stages x tensor ranks x data-parallel replicas on gpt-small-cpu.

Trains configs/gpt-small-cpu.yaml the same steps at (P, T, R) = (1,1,1), (2,1,1), (1,1,2),
(2,1,2), (1,1,2) and (2,1,2) with ZeRO-1, ZeRO-2 and ZeRO-3, and (1,2,1), (2,2,1) with tensor
parallelism, as real processes under the local launcher, one thread each (bench/README.md).
Prints per layout: processes, tokens/s of the whole job (the same global batch every time), its
ratio to (1,1,1), the seconds per step the head rank spent in exchanges with its replicas
(all-reduce, or ZeRO's reduce-scatter and all-gather, ZeRO-2's and -3's inside the layers'
actions included; mean over steps), the MiB one replica sends the others per step
(`baton plan`'s replica_bytes_per_step: planner/fit.h), the MiB per step the head rank summed
over its tensor group and the seconds that took (mean over steps), every rank's ledger peak
beside the planner's prediction, and every rank's optimizer bytes. P*R processes on a machine
with fewer cores oversubscribe it: the tokens/s of those layouts measure the machine, not the
layout, and the table says so.

Checks (exit 1 if one fails): every loss finite; every layout's losses within 1e-4 relative of
(1,1)'s (the same global batch; rounding differs with the order of additions); every rank's
measured peak equals the prediction within 2%; without ZeRO replicas' ranks book the same peak
as replica 0's; with ZeRO each stage's replicas hold together its unsharded optimizer bytes;
ZeRO-2's and ZeRO-3's losses equal ZeRO-1's at the same layout bit for bit;
with T = 2 each rank holds under three quarters of T = 1's optimizer bytes (the cut matrices
halve; norms and biases stay whole) and sums something over its tensor group every step.

usage: bench/parallel_bench.py BATON [--steps N] [--json FILE]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs",
                      "gpt-small-cpu.yaml")
# (stages, tensor ranks, replicas, zero)
LAYOUTS = [(1, 1, 1, 0), (2, 1, 1, 0), (1, 1, 2, 0), (2, 1, 2, 0), (1, 1, 2, 1), (2, 1, 2, 1),
           (1, 1, 2, 2), (2, 1, 2, 2), (1, 1, 2, 3), (2, 1, 2, 3), (1, 2, 1, 0), (2, 2, 1, 0)]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"parallel_bench: {' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout + result.stderr


def train(baton, work, stages, tensor, replicas, zero, steps):
    out = os.path.join(work, f"p{stages}t{tensor}r{replicas}z{zero}")
    report = os.path.join(out, "report.json")
    common = ["--set", f"parallel.stages={stages}", "--set", f"parallel.tensor={tensor}",
              "--set", f"parallel.replicas={replicas}", "--set", f"parallel.zero={zero}",
              "--set", "device.threads=1"]
    plan = json.loads(run([baton, "plan", CONFIG, "--format", "json", "--log-level", "warn"] +
                          common))
    run([baton, "run", CONFIG, "--set", f"train.steps={steps}", "--set", f"output.dir={out}",
         "--set", "output.final_checkpoint=false", "--report", report, "--log-level", "warn"] +
        common)
    with open(report) as f:
        r = json.load(f)
    allreduce = [s.get("allreduce_s", 0.0) for s in r["steps"]]
    tensor_bytes = [s.get("tensor_bytes", 0.0) for s in r["steps"]]
    tensor_s = [s.get("tensor_s", 0.0) for s in r["steps"]]
    return {
        "stages": stages,
        "tensor": tensor,
        "replicas": replicas,
        "zero": zero,
        "optimizer": [s["memory"]["peak"]["optimizer"] for s in r["stages"]],
        "processes": stages * tensor * replicas,
        "tensor_bytes": sum(tensor_bytes) / len(tensor_bytes),
        "tensor_s": sum(tensor_s) / len(tensor_s),
        "losses": [s["loss"] for s in r["steps"]],
        "tokens_per_s": r["tokens_per_s"],
        "peaks": [s["memory"]["peak"]["total"] for s in r["stages"]],
        "predicted": [s["memory"]["predicted"]["total"] for s in plan["stages"]],
        "allreduce_s": sum(allreduce) / len(allreduce) if allreduce else 0.0,
        "replica_bytes": plan.get("replica_bytes_per_step", 0),
    }


def mib(n):
    return f"{n / 2**20:.2f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("baton")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json")
    parser.add_argument("--layouts", nargs="+", metavar="P,T,R,ZERO",
                        help="only these layouts (the first is the baseline); default: all")
    args = parser.parse_args()
    layouts = LAYOUTS
    if args.layouts:
        layouts = [tuple(int(x) for x in text.split(",")) for text in args.layouts]
        if any(len(layout) != 4 for layout in layouts):
            parser.error("--layouts: each layout is P,T,R,ZERO, e.g. 1,2,1,0")
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="parallel_bench.") as work:
        for stages, tensor, replicas, zero in layouts:
            results.append(train(args.baton, work, stages, tensor, replicas, zero, args.steps))
    base = results[0]
    failures = []
    print(f"parallel_bench: gpt-small-cpu, {args.steps} steps, 1 thread per process, "
          f"{cores} cores, load average {load:.2f} at start")
    print(f"{'P':>2} {'T':>2} {'R':>2} {'zero':>4} {'procs':>5} {'tokens/s':>9} {'vs 1':>7} "
          f"{'comm s':>7} {'DP MiB':>7} {'TP MiB':>7} {'TP s':>7}  rank peaks MiB (predicted) | "
          "optimizer MiB per rank")
    for r in results:
        peaks = " ".join(f"{mib(m)}({mib(p)})" for m, p in zip(r["peaks"], r["predicted"]))
        optimizer = " ".join(mib(o) for o in r["optimizer"])
        note = "  oversubscribed" if r["processes"] > cores else ""
        print(f"{r['stages']:>2} {r['tensor']:>2} {r['replicas']:>2} {r['zero']:>4} "
              f"{r['processes']:>5} {r['tokens_per_s']:>9.0f} "
              f"{r['tokens_per_s'] / base['tokens_per_s']:>6.2f}x {r['allreduce_s']:>7.4f} "
              f"{mib(r['replica_bytes']):>7} {mib(r['tensor_bytes']):>7} {r['tensor_s']:>7.4f}  "
              f"{peaks} | {optimizer}{note}")
        if not all(math.isfinite(x) for x in r["losses"]):
            failures.append(f"P={r['stages']} R={r['replicas']}: a loss is not finite")
        worst = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"]))
        if worst > 1e-4:
            failures.append(f"P={r['stages']} R={r['replicas']}: losses differ from 1x1 by "
                            f"{worst:.2e} relative")
        for k, (m, p) in enumerate(zip(r["peaks"], r["predicted"])):
            if abs(m - p) > 0.02 * p:
                failures.append(f"P={r['stages']} R={r['replicas']} rank {k}: measured "
                                f"{mib(m)} MiB, predicted {mib(p)} MiB")
        for k in range(r["stages"], r["processes"]):
            if r["tensor"] == 1 and not r["zero"] and r["peaks"][k] != r["peaks"][k % r["stages"]]:
                failures.append(f"P={r['stages']} R={r['replicas']} rank {k}: peak differs from "
                                f"replica 0's")
    for r in results:
        if r["tensor"] == 1:
            continue
        whole = next((q for q in results
                      if (q["stages"], q["tensor"], q["replicas"], q["zero"]) ==
                      (r["stages"], 1, 1, 0)), None)
        for k in range(r["processes"] if whole is not None else 0):
            stage = k // r["tensor"]
            if not 2 * r["optimizer"][k] < whole["optimizer"][stage] * 1.5:
                failures.append(f"P={r['stages']} T={r['tensor']} rank {k}: optimizer "
                                f"{r['optimizer'][k]} bytes, T=1's {whole['optimizer'][stage]}")
            if r["tensor_bytes"] <= 0:
                failures.append(f"P={r['stages']} T={r['tensor']}: no tensor-group traffic")
    for r in results:
        if not r["zero"]:
            continue
        plain = next((q for q in results
                      if (q["stages"], q["tensor"], q["replicas"], q["zero"]) ==
                      (r["stages"], r["tensor"], r["replicas"], 0)), None)
        for s in range(r["stages"] if plain is not None else 0):
            together = sum(r["optimizer"][k] for k in range(s, r["processes"], r["stages"]))
            if together != plain["optimizer"][s]:
                failures.append(f"P={r['stages']} R={r['replicas']} ZeRO-{r['zero']} stage {s}: "
                                f"optimizer {together} bytes over the replicas, "
                                f"{plain['optimizer'][s]} without ZeRO")
        one = next((q for q in results
                    if (q["stages"], q["tensor"], q["replicas"], q["zero"]) ==
                    (r["stages"], r["tensor"], r["replicas"], 1)), None)
        if r["zero"] >= 2 and one is not None and r["losses"] != one["losses"]:
            failures.append(f"P={r['stages']} R={r['replicas']}: ZeRO-{r['zero']}'s losses differ "
                            "from ZeRO-1's")
    if any(r["processes"] > cores for r in results):
        print(f"note: layouts of more than {cores} processes oversubscribe this {cores}-core "
              "machine; their tokens/s say little about the layout itself")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
