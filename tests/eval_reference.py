#!/usr/bin/env python3
"""An independent GPT-2 evaluation, for checking `baton eval` (ctest eval_reference).

Reads only a `baton export` folder (model.safetensors + config.json, the transformers GPT-2
layout: docs/safetensors.md) and the held-out data, picks the evaluation windows by the rule in
docs/data.md ("Evaluation"), runs GPT-2 in plain Python (float64, no numpy, no torch) and prints
the mean cross-entropy over every predicted token: what `baton eval` reports.

  eval_reference.py EXPORT_DIR --data PATH (--eval-fraction F | --eval-path P)
                    --seq-len L --batch-size B --batches K

With --expect LOSS it exits 1 unless |LOSS - reference| <= 1e-5 x max(1, reference).
"""

import argparse
import json
import math
import os
import struct
import sys
from operator import mul


def read_safetensors(path):
    """name -> (shape, flat list of floats); F32 only (the default export)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        payload = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", f"{name}: {entry['dtype']} (export with --dtype f32)"
        begin, end = entry["data_offsets"]
        count = (end - begin) // 4
        tensors[name] = (entry["shape"], list(struct.unpack(f"<{count}f", payload[begin:end])))
    return tensors


def text_tokens(path):
    """Byte-level text: a file, or every file below a folder in sorted relative-path order."""
    if os.path.isfile(path):
        files = [path]
    else:
        found = []
        for root, _, names in os.walk(path, followlinks=True):
            for name in names:
                full = os.path.join(root, name)
                if os.path.isfile(full):
                    found.append((os.path.relpath(full, path).encode(), full))
        seen, files = set(), []
        for _, full in sorted(found):
            real = os.path.realpath(full)
            if real not in seen:
                seen.add(real)
                files.append(full)
    data = b""
    for name in files:
        with open(name, "rb") as f:
            data += f.read()
    return list(data)


class Gpt2:
    """GPT-2 from a transformers-layout export: Conv1D weights are (in, out)."""

    def __init__(self, export_dir):
        cfg = json.load(open(os.path.join(export_dir, "config.json")))
        t = read_safetensors(os.path.join(export_dir, "model.safetensors"))
        self.C, self.H = cfg["n_embd"], cfg["n_head"]
        self.V, self.layers, self.eps = cfg["vocab_size"], cfg["n_layer"], cfg["layer_norm_epsilon"]
        self.t = t
        # Columns of every Conv1D weight, so that a matrix product is sum(map(mul, x, column)).
        self.columns = {}
        for name, (shape, flat) in t.items():
            if len(shape) == 2 and not name.endswith(("wte.weight", "wpe.weight")):
                n_in, n_out = shape
                self.columns[name] = [flat[j::n_out] for j in range(n_out)]
        C = self.C
        wte = t["transformer.wte.weight"][1]
        self.wte_rows = [wte[v * C:(v + 1) * C] for v in range(self.V)]

    def w(self, name):
        return self.t["transformer." + name][1]

    def linear(self, x, name):
        b = self.w(name + ".bias")
        cols = self.columns["transformer." + name + ".weight"]
        return [bj + sum(map(mul, x, col)) for bj, col in zip(b, cols)]

    def layernorm(self, x, name):
        mean = sum(x) / len(x)
        var = sum((v - mean) ** 2 for v in x) / len(x)
        inv = 1.0 / math.sqrt(var + self.eps)
        g, b = self.w(name + ".weight"), self.w(name + ".bias")
        return [(v - mean) * inv * gi + bi for v, gi, bi in zip(x, g, b)]

    @staticmethod
    def gelu(v):  # tanh approximation (gelu_new)
        return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))

    def window_loss_sum(self, tokens, targets):
        C, H = self.C, self.H
        D = C // H
        wpe = self.w("wpe.weight")
        h = [[a + b for a, b in zip(self.wte_rows[tok], wpe[p * C:(p + 1) * C])]
             for p, tok in enumerate(tokens)]
        for layer in range(self.layers):
            pre = f"h.{layer}."
            qkv = [self.linear(self.layernorm(x, pre + "ln_1"), pre + "attn.c_attn") for x in h]
            att = [[0.0] * C for _ in h]
            for hd in range(H):
                q = [row[hd * D:(hd + 1) * D] for row in qkv]
                k = [row[C + hd * D:C + (hd + 1) * D] for row in qkv]
                v = [row[2 * C + hd * D:2 * C + (hd + 1) * D] for row in qkv]
                for p in range(len(h)):
                    s = [sum(map(mul, q[p], k[r])) / math.sqrt(D) for r in range(p + 1)]
                    top = max(s)
                    e = [math.exp(z - top) for z in s]
                    total = sum(e)
                    for d in range(D):
                        att[p][hd * D + d] = sum(e[r] * v[r][d] for r in range(p + 1)) / total
            h = [[a + b for a, b in zip(x, self.linear(y, pre + "attn.c_proj"))]
                 for x, y in zip(h, att)]
            for i, x in enumerate(h):
                hidden = [self.gelu(z) for z in
                          self.linear(self.layernorm(x, pre + "ln_2"), pre + "mlp.c_fc")]
                h[i] = [a + b for a, b in zip(x, self.linear(hidden, pre + "mlp.c_proj"))]
        loss = 0.0
        for x, target in zip(h, targets):
            y = self.layernorm(x, "ln_f")
            logits = [sum(map(mul, y, row)) for row in self.wte_rows]  # the tied head
            top = max(logits)
            loss += top + math.log(sum(math.exp(z - top) for z in logits)) - logits[target]
        return loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dir")
    parser.add_argument("--data", help="data.path (text), for --eval-fraction")
    parser.add_argument("--eval-fraction", type=float)
    parser.add_argument("--eval-path", help="data.eval_path (text)")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--batches", type=int, required=True)
    parser.add_argument("--expect", type=float, help="baton eval's loss to compare with")
    args = parser.parse_args()

    if args.eval_path:
        held_out = text_tokens(args.eval_path)
    else:
        stream = text_tokens(args.data)
        n_eval = math.floor(len(stream) * args.eval_fraction)  # docs/data.md: the tail
        held_out = stream[len(stream) - n_eval:]
    L = args.seq_len
    windows = args.batch_size * args.batches
    assert windows <= (len(held_out) - 1) // L, "not enough held-out windows"
    model = Gpt2(args.export_dir)
    total = 0.0
    for w in range(windows):  # window w: tokens [w*L, w*L + L), targets shifted by one
        total += model.window_loss_sum(held_out[w * L:w * L + L], held_out[w * L + 1:w * L + L + 1])
    reference = total / (windows * L)
    print(f"reference loss {reference:.9f} over {windows} windows of {L} tokens")
    if args.expect is not None:
        error = abs(args.expect - reference) / max(1.0, abs(reference))
        print(f"baton eval loss {args.expect:.9f}, normalised difference {error:.2e}")
        if not error <= 1e-5:
            print("FAIL: baton eval and the reference disagree")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
