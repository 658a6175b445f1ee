#!/usr/bin/env python3
"""moe_bench: mixture of experts beside a dense model, and expert parallelism's all-to-all.

Trains configs/moe-tiny.yaml (8 experts of width 128, two per token, a gated shared expert of
width 128: active MLP work 1.09x llama-tiny's dense 352) and configs/llama-tiny.yaml the same
steps on one stage as real processes under the local launcher, one thread each, at two replicas
with parallel.experts 1 and 2 (moe-tiny), and with one replica (both). Prints per run: tokens/s
of the whole job, its ratio to llama-tiny's at the same replicas, the head rank's seconds per
step in the experts' all-to-alls and their share of the step (mean over steps after the first),
the MiB it sent per step, and every rank's ledger peak beside the plan's.

Checks (exit 1 if one fails): every loss finite; moe-tiny at E = 2 ends with E = 1's parameter
checksum and losses (bit for bit: docs/parallel.md, "Expert parallelism"); with E = 2 every step
moved bytes; each rank's peak at most the plan's (the plan books the worst routing), params,
grads and optimizer equal to it.

usage: bench/moe_bench.py BATON [--steps N] [--json FILE]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
# (config, replicas, experts)
RUNS = [("llama-tiny", 1, 1), ("moe-tiny", 1, 1), ("llama-tiny", 2, 1), ("moe-tiny", 2, 1),
        ("moe-tiny", 2, 2)]
EXACT = ("params", "grads", "optimizer")


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"moe_bench: {' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout + result.stderr


def train(baton, work, name, replicas, experts, steps):
    config = os.path.join(CONFIGS, name + ".yaml")
    out = os.path.join(work, f"{name}-r{replicas}e{experts}")
    report = os.path.join(out, "report.json")
    common = ["--set", "parallel.stages=1", "--set", f"parallel.replicas={replicas}",
              "--set", "device.threads=1"]
    if experts > 1:
        common += ["--set", f"parallel.experts={experts}"]
    run([baton, "run", config, "--set", f"train.steps={steps}", "--set", "train.log_every=1",
         "--set", f"output.dir={out}", "--set", "output.final_checkpoint=false",
         "--report", report, "--log-level", "warn"] + common)
    with open(report) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("baton")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--json")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"moe_bench: {args.steps} steps, one stage, one thread per process, load average {load}")
    failures = []
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for name, replicas, experts in RUNS:
            report = train(args.baton, work, name, replicas, experts, args.steps)
            steps = report["steps"][1:]  # the first step warms up
            losses = [s["loss"] for s in report["steps"]]
            if not all(math.isfinite(l) for l in losses):
                failures.append(f"{name} R={replicas} E={experts}: a loss is not finite")
            a2a_s = sum(s.get("alltoall_s", 0.0) for s in steps) / len(steps)
            step_s = sum(s["step_s"] for s in steps) / len(steps)
            a2a_mib = sum(s.get("alltoall_bytes", 0.0) for s in steps) / len(steps) / 2**20
            if experts > 1 and any(s.get("alltoall_bytes", 0.0) <= 0 for s in report["steps"]):
                failures.append(f"{name} E={experts}: a step moved no rows")
            for stage in report["stages"]:
                peak, predicted = stage["memory"]["peak"], stage["memory"]["predicted"]
                where = f"{name} R={replicas} E={experts} rank {stage.get('rank', 0)}"
                if peak["total"] > predicted["total"]:
                    failures.append(f"{where}: peak {peak['total']} over the plan's "
                                    f"{predicted['total']}")
                for c in EXACT:
                    if peak.get(c) != predicted.get(c):
                        failures.append(f"{where}: {c} {peak.get(c)} != plan {predicted.get(c)}")
            rows[(name, replicas, experts)] = {
                "tokens_per_s": report["tokens_per_s"], "alltoall_s": a2a_s,
                "alltoall_share": a2a_s / step_s if step_s > 0 else 0.0,
                "alltoall_mib": a2a_mib, "checksum": report["param_checksum"], "losses": losses,
                "peak_mib": max(s["memory"]["peak"]["total"] for s in report["stages"]) / 2**20,
                "predicted_mib":
                    max(s["memory"]["predicted"]["total"] for s in report["stages"]) / 2**20}
    e1, e2 = rows[("moe-tiny", 2, 1)], rows[("moe-tiny", 2, 2)]
    if e1["checksum"] != e2["checksum"] or e1["losses"] != e2["losses"]:
        failures.append(f"moe-tiny R=2: E=2 ends with {e2['checksum']}, E=1 with {e1['checksum']}")
    print(f"{'run':<24} {'tokens/s':>9} {'x dense':>8} {'a2a s/step':>11} {'a2a share':>10} "
          f"{'a2a MiB/step':>13} {'peak MiB':>9} {'plan MiB':>9}")
    for (name, replicas, experts), r in rows.items():
        dense = rows[("llama-tiny", replicas, 1)]["tokens_per_s"]
        label = f"{name} R={replicas} E={experts}"
        print(f"{label:<24} {r['tokens_per_s']:>9.0f} {r['tokens_per_s'] / dense:>8.2f} "
              f"{r['alltoall_s']:>11.4f} {100 * r['alltoall_share']:>9.1f}% "
              f"{r['alltoall_mib']:>13.2f} {r['peak_mib']:>9.1f} {r['predicted_mib']:>9.1f}")
    print(f"checksum moe-tiny R=2: E=1 {e1['checksum']}, E=2 {e2['checksum']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}-r{r}e{e}": v for (n, r, e), v in rows.items()}, f, indent=1)
    for failure in failures:
        print("moe_bench: FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
