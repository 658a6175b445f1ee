#!/usr/bin/env python3
"""checkpoint_bench: what saving a checkpoint every 5 steps costs the step time, synchronously and
in the background (output.async_checkpoint).

Trains configs/gpt-small-cpu.yaml (fp32, one process, one thread) the same steps three ways: no
checkpoints, a synchronous checkpoint every 5 steps, a background one every 5 steps
(output.final_checkpoint off, so every save has steps after it). A step's time is its step_s plus
the checkpoint_s of a step that saved (report.json: the save's share of the step end, for a
background save the copy into host buffers and any wait for the previous write). Prints per mode
the mean step time over steps 2..N, its cost against the run without checkpoints (the issue's
target: at most 5% for background checkpoints), the mean checkpoint_s of the saving steps, the
checkpoint's bytes and the run's ledger peak of checkpoint memory (the host copy). With
--repeats R the three runs go R times over, alternating, keeping each mode's fastest mean.

Checks (exit 1 if one fails): every mode's losses and parameter checksum equal the run without
checkpoints' (saving changes nothing), the background checkpoints' layer files equal the
synchronous ones' byte for byte (the manifests' checksums), only the background run books
checkpoint memory.

usage: bench/checkpoint_bench.py BATON [--steps N] [--every K] [--repeats R]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs",
                      "gpt-small-cpu.yaml")
MODES = [("none", []),
         ("sync", ["output.checkpoint_every={every}"]),
         ("async", ["output.checkpoint_every={every}", "output.async_checkpoint=true"])]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"checkpoint_bench: {' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")


def train(baton, out, sets):
    report = os.path.join(out, "report.json")
    cmd = [baton, "run", CONFIG, "--set", f"output.dir={out}", "--report", report,
           "--log-level", "warn", "--set", "output.final_checkpoint=false",
           "--set", "device.threads=1"]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    with open(report) as f:
        return json.load(f)


def layer_files(step_dir):
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    return {e["name"]: e["fnv1a64"] for e in manifest["files"] if "layer" in e}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("baton")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"checkpoint_bench: gpt-small-cpu fp32, 1 process x 1 thread, {args.steps} steps, "
          f"a checkpoint every {args.every} (no final one); load average {load}")
    failures = []
    best = {}
    with tempfile.TemporaryDirectory(prefix="checkpoint_bench.") as work:
        reports = {}
        for repeat in range(args.repeats):
            for mode, sets in MODES:
                out = os.path.join(work, f"{mode}-{repeat}")
                r = train(args.baton, out, [f"train.steps={args.steps}"] +
                          [s.format(every=args.every) for s in sets])
                steps = r["steps"][1:]
                mean = sum(s["step_s"] + s.get("checkpoint_s", 0.0) for s in steps) / len(steps)
                saves = [s["checkpoint_s"] for s in r["steps"] if "checkpoint_s" in s]
                if mode not in best or mean < best[mode]["mean"]:
                    best[mode] = {"mean": mean, "saves": saves, "out": out}
                reports.setdefault(mode, r)
        base = reports["none"]
        for mode, r in reports.items():
            if [s["loss"] for s in r["steps"]] != [s["loss"] for s in base["steps"]]:
                failures.append(f"{mode}: losses differ from the run without checkpoints")
            if r["param_checksum"] != base["param_checksum"]:
                failures.append(f"{mode}: parameter checksum differs")
            copy = max(s["memory"]["peak"]["checkpoint"] for s in r["stages"])
            best[mode]["copy"] = copy
            if (copy > 0) != (mode == "async"):
                failures.append(f"{mode}: checkpoint memory {copy} bytes")
        saved = list(range(args.every, args.steps + 1, args.every))
        bytes_per_save = 0
        for step in saved:
            sync_dir = os.path.join(best["sync"]["out"], "checkpoints", f"step-{step}")
            async_dir = os.path.join(best["async"]["out"], "checkpoints", f"step-{step}")
            if layer_files(sync_dir) != layer_files(async_dir):
                failures.append(f"step {step}: the background checkpoint's files differ")
            bytes_per_save = sum(os.path.getsize(os.path.join(sync_dir, n))
                                 for n in os.listdir(sync_dir))
        base_mean = best["none"]["mean"]
        print(f"{'mode':<6} {'step s':>9} {'cost':>8} {'saves':>5} {'checkpoint_s':>12} "
              f"{'copy MiB':>9}")
        for mode, _ in MODES:
            b = best[mode]
            saves = b["saves"]
            mean_save = sum(saves) / len(saves) if saves else 0.0
            print(f"{mode:<6} {b['mean']:>9.4f} {100 * (b['mean'] / base_mean - 1):>7.2f}% "
                  f"{len(saves):>5} {mean_save:>12.4f} {b['copy'] / 2**20:>9.2f}")
        cost = 100 * (best["async"]["mean"] / base_mean - 1)
        print(f"checkpoint size {bytes_per_save / 2**20:.2f} MiB; background checkpoints every "
              f"{args.every} steps cost {cost:.2f}% of the step time (target <= 5%: "
              f"{'met' if cost <= 5 else 'not met'}); synchronous "
              f"{100 * (best['sync']['mean'] / base_mean - 1):.2f}%")
    with open("/proc/loadavg") as f:
        print(f"load average at the end {' '.join(f.read().split()[:3])}")
    for f in failures:
        print(f"FAILED: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
