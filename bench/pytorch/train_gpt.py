#!/usr/bin/python3
"""PyTorch CPU eager reference for Baton's training benchmarks (bench/README.md, "PyTorch").

Trains the same GPT-2 model Baton trains (docs/model.md: token + position embedding, pre-LN blocks
with a fused qkv projection, tanh GELU, final LayerNorm, LM head tied to the token embedding, no
dropout), with the same batch and micro-batch accumulation (each micro-batch's loss scaled by
1/m), global-norm clipping, AdamW (beta 0.9/0.95, eps 1e-8, weight decay on tensors of rank >= 2)
and warmup + cosine lr, on torch.set_num_threads(n) threads, and prints tokens/s measured as
Baton's benchmarks measure it (step 1 left out; tokens = batch_size x seq_len per step).

With --baton-json (train_bench's --json output) it runs every (model, threads) that Baton ran,
with the same config and step count, and prints both figures side by side. For the models in
--check-losses it also starts from Baton's exact initial weights and reads Baton's exact batches
(baton_rules.py, from docs/data.md and docs/model.md) and compares every step's loss with
Baton's: an independent implementation's check. Exits 1 if a loss is not finite or the
comparison fails.

Run with Debian's interpreter, which sees python3-torch:  /usr/bin/python3 train_gpt.py ...
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baton_rules  # noqa: E402

# |a - b| / max(|a|, 1) allowed between Baton's and PyTorch's loss at any step: float32 in a
# different summation order, through a few AdamW steps.
LOSS_TOLERANCE = 1e-3


def f32(x):
    """x rounded to float32, as Baton's float lr is."""
    return struct.unpack("f", struct.pack("f", x))[0]


class Gpt(torch.nn.Module):
    """GPT-2 with Baton's parameter names and Conv1D (in, out) weight layout."""

    def __init__(self, vocab_size, context, num_layers, num_heads, width):
        super().__init__()
        self.num_layers, self.num_heads, self.width = num_layers, num_heads, width
        plan = baton_rules.gpt_init_plan(vocab_size, context, num_layers, width)
        self.names = [p[0] for p in plan]
        self.params = torch.nn.ParameterDict(
            {n.replace(".", "_"): torch.nn.Parameter(torch.empty(s)) for n, s, *_ in plan}
        )
        self.plan = plan

    def p(self, name):
        return self.params[name.replace(".", "_")]

    def init_exact(self, seed):
        """Baton's initial weights, drawn from Baton's streams (slow: pure Python)."""
        with torch.no_grad():
            for name, shape, init, layer, index in self.plan:
                param = self.p(name)
                if init in ("ones", "zeros"):
                    param.fill_(1.0 if init == "ones" else 0.0)
                    continue
                std = baton_rules.init_std(init, self.num_layers)
                values = baton_rules.normal_values(seed, layer, index, param.numel(), std)
                param.copy_(torch.tensor(values, dtype=torch.float64).view(shape).float())

    def init_fast(self, seed):
        """The same distributions from torch's generator: for timing only."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, _, init, _, _ in self.plan:
                param = self.p(name)
                if init in ("ones", "zeros"):
                    param.fill_(1.0 if init == "ones" else 0.0)
                else:
                    std = baton_rules.init_std(init, self.num_layers)
                    param.normal_(0.0, std, generator=generator)

    def forward(self, tokens, targets):
        b, t = tokens.shape
        c, nh = self.width, self.num_heads
        d = c // nh
        wte = self.p("wte.weight")
        x = wte[tokens] + self.p("wpe.weight")[:t]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for i in range(self.num_layers):
            h = f"h.{i}."
            y = F.layer_norm(x, (c,), self.p(h + "ln_1.weight"), self.p(h + "ln_1.bias"), 1e-5)
            qkv = torch.addmm(self.p(h + "attn.c_attn.bias"), y.view(-1, c),
                              self.p(h + "attn.c_attn.weight")).view(b, t, 3 * c)
            q, k, v = (z.view(b, t, nh, d).transpose(1, 2) for z in qkv.split(c, dim=2))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            probs = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (probs @ v).transpose(1, 2).reshape(b * t, c)
            x = x + torch.addmm(self.p(h + "attn.c_proj.bias"), y,
                                self.p(h + "attn.c_proj.weight")).view(b, t, c)
            y = F.layer_norm(x, (c,), self.p(h + "ln_2.weight"), self.p(h + "ln_2.bias"), 1e-5)
            y = torch.addmm(self.p(h + "mlp.c_fc.bias"), y.view(-1, c),
                            self.p(h + "mlp.c_fc.weight"))
            y = F.gelu(y, approximate="tanh")
            x = x + torch.addmm(self.p(h + "mlp.c_proj.bias"), y,
                                self.p(h + "mlp.c_proj.weight")).view(b, t, c)
        x = F.layer_norm(x, (c,), self.p("ln_f.weight"), self.p("ln_f.bias"), 1e-5)
        logits = x.view(-1, c) @ wte.t()  # the tied LM head, no bias
        return F.cross_entropy(logits, targets.reshape(-1))


def make_optimizer(model, train):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": train["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train["lr"], betas=(train["beta1"], train["beta2"]),
                             eps=train["eps"], foreach=False)


def train(config, threads, steps, corpus, exact_init):
    """Trains `steps` steps; returns (losses, step seconds)."""
    torch.set_num_threads(threads)
    model_cfg, train_cfg = config["model"], config["train"]
    seq_len = config["data"].get("seq_len", 0) or model_cfg["context"]
    batch, micro = train_cfg["batch_size"], train_cfg["micro_batches"]
    per_micro = batch // micro
    model = Gpt(model_cfg["vocab_size"], model_cfg["context"], model_cfg["num_layers"],
                model_cfg["num_heads"], model_cfg["width"])
    if exact_init:
        model.init_exact(train_cfg["seed"])
    else:
        model.init_fast(train_cfg["seed"])
    optimizer = make_optimizer(model, train_cfg)
    data = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()
    offsets = torch.arange(seq_len + 1)
    losses, seconds = [], []
    for step in range(1, steps + 1):
        start = time.perf_counter()
        starts = baton_rules.batch_windows(train_cfg["seed"], step - 1, batch, len(corpus),
                                           seq_len)
        windows = data[torch.tensor(starts).unsqueeze(1) + offsets]  # (batch, seq_len + 1)
        optimizer.zero_grad(set_to_none=False)
        step_loss = 0.0
        for k in range(micro):
            rows = windows[k * per_micro:(k + 1) * per_micro]
            loss = model(rows[:, :-1], rows[:, 1:])
            (loss * (1.0 / micro)).backward()
            step_loss += loss.item()
        if train_cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg["grad_clip"])
        lr = f32(baton_rules.learning_rate(step, train_cfg["lr"], train_cfg["min_lr"],
                                           train_cfg["warmup_steps"], steps,
                                           train_cfg["lr_schedule"] == "cosine"))
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        losses.append(step_loss / micro)
    return losses, seconds


def tokens_per_s(config, seconds):
    seq_len = config["data"].get("seq_len", 0) or config["model"]["context"]
    tokens_per_step = config["train"]["batch_size"] * seq_len
    measured = seconds[1:]  # step 1 is warm-up, as in Baton's benchmarks
    return tokens_per_step * len(measured) / sum(measured)


def load_runs(args):
    """[(name, config, threads, steps, baton run or None)] to train."""
    if args.baton_json:
        with open(args.baton_json) as f:
            bench = json.load(f)
        # Baton's fp32 runs (the reference is fp32), with Baton's step count, which its cosine
        # schedule spans too.
        return [(r["model"], r["config"], r["threads"], r["steps"], r) for r in bench["runs"]
                if r.get("dtype", "fp32") == "fp32"]
    import yaml  # only for standalone runs; Debian's python3-yaml

    runs = []
    for path in args.config:
        with open(path) as f:
            config = yaml.safe_load(f)
        name = os.path.splitext(os.path.basename(path))[0]
        defaults = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "min_lr": 0.0, "warmup_steps": 0,
                    "lr_schedule": "cosine", "weight_decay": 0.1, "grad_clip": 1.0, "seed": 1337}
        config["train"] = {**defaults, **config["train"]}
        for threads in args.threads:
            runs.append((name, config, threads, args.steps, None))
    return runs


def check_losses(name, threads, ours, baton_run):
    baton = baton_run["losses"]
    steps = min(len(ours), len(baton))
    worst, worst_step = 0.0, 0
    for i in range(steps):
        diff = abs(ours[i] - baton[i]) / max(abs(baton[i]), 1.0)
        if diff > worst:
            worst, worst_step = diff, i + 1
    ok = worst <= LOSS_TOLERANCE
    print(f"loss check {name} ({threads} thread(s)): {steps} steps, Baton {baton[0]:.6f} .. "
          f"{baton[steps - 1]:.6f}, PyTorch {ours[0]:.6f} .. {ours[steps - 1]:.6f}; max relative "
          f"difference {worst:.2e} at step {worst_step} (<= {LOSS_TOLERANCE:g}): "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baton-json", help="train_bench --json output: runs and losses to match")
    parser.add_argument("--config", nargs="*", default=[], help="YAML configs (standalone)")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--steps", type=int, default=5, help="steps per run (standalone)")
    parser.add_argument("--check-losses", default="gpt-tiny",
                        help="comma-separated models to start from Baton's exact weights and "
                        "compare losses with (needs --baton-json); '' for none")
    args = parser.parse_args()
    if not args.baton_json and not args.config:
        parser.error("give --baton-json or --config")
    check = {m for m in args.check_losses.split(",") if m}
    print(f"PyTorch {torch.__version__} CPU eager reference "
          f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs)")
    corpora, rows, ok = {}, [], True
    for name, config, threads, steps, baton_run in load_runs(args):
        path = config["data"]["path"]
        if path not in corpora:
            corpora[path] = baton_rules.read_text_corpus(path)
        exact = baton_run is not None and name in check
        losses, seconds = train(config, threads, steps, corpora[path], exact)
        if not all(math.isfinite(x) for x in losses):
            print(f"{name} ({threads} thread(s)): a loss is not finite: {losses}")
            ok = False
        if exact:
            ok = check_losses(name, threads, losses, baton_run) and ok
        rate = tokens_per_s(config, seconds)
        rows.append((name, threads, steps, baton_run, rate))
        print(f"  ran {name} at {threads} thread(s): {steps} steps, {rate:.0f} tokens/s", flush=True)
    print()
    # Each implementation's model FLOP/s as a fraction of the f32 GEMM peak Baton measured in its
    # run at the same thread count (train_bench's MFU; the same model FLOPs per token for both).
    header = ("model", "threads", "steps", "Baton tokens/s", "PyTorch tokens/s", "Baton / PyTorch",
              "GEMM peak GFLOP/s", "Baton of peak", "PyTorch of peak")
    table = [header]
    for name, threads, steps, baton_run, ours in rows:
        if baton_run is None:
            table.append((name, str(threads), f"1+{steps - 1}", "-", f"{ours:.0f}", "-", "-", "-",
                          "-"))
            continue
        baton = baton_run["tokens_per_s"]
        peak = baton_run["gemm_peak_gflops"]
        flops = baton_run["model_flops_per_token"]
        def of_peak(rate):
            return f"{100 * rate * flops / (peak * 1e9):.1f}%"
        table.append((name, str(threads), f"1+{steps - 1}", f"{baton:.0f}", f"{ours:.0f}",
                      f"{baton / ours:.2f}x", f"{peak:.1f}", of_peak(baton), of_peak(ours)))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for j, r in enumerate(table):
        print("  ".join(r[0].ljust(widths[0]) if i == 0 else r[i].rjust(widths[i])
                        for i in range(len(r))))
        if j == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    print("(steps: warm-up + measured; tokens/s as in bench/README.md)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
