"""Baton's documented rules, re-implemented independently in plain Python.

The PyTorch reference (train_gpt.py) uses these to feed its model the very same batches and
the very same initial weights as Baton, so the two implementations' losses can be compared step
by step. Each function follows a document, not Baton's code:

- the generator (SplitMix64 finaliser, xoshiro256**, unbiased NextBelow, Box-Muller normals):
  docs/data.md "The generator", core/random.h for NextDouble / NextNormal;
- the byte-level corpus of a file or folder and the sampling rule: docs/data.md;
- the GPT-2 initialisation streams: docs/model.md "Initialisation".

Pure Python, no dependencies; slow (a few microseconds per number), which is fine for gpt-tiny's
0.8 M parameters.
"""

import math
import os

M64 = (1 << 64) - 1
DATA_STREAM = 0x64617461  # "data"
INIT_STD = 0.02


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Rng:
    """xoshiro256** seeded through SplitMix64, with Baton's derived draws."""

    def __init__(self, key):
        x = key
        self.s = []
        for _ in range(4):
            x = mix64(x)
            self.s.append(x)
        self.spare = None

    @staticmethod
    def for_stream(seed, ids):
        key = mix64(seed)
        for i in ids:
            key = mix64(key ^ mix64((i + 0x632BE59BD9B4E019) & M64))
        return Rng(key)

    def next_u64(self):
        s0, s1, s2, s3 = self.s
        x = (s1 * 5) & M64
        result = ((((x << 7) | (x >> 57)) & M64) * 9) & M64
        t = (s1 << 17) & M64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 45) | (s3 >> 19)) & M64
        self.s = [s0, s1, s2, s3]
        return result

    def next_below(self, bound):
        limit = M64 - M64 % bound
        while True:
            x = self.next_u64()
            if x < limit:
                return x % bound

    def next_double(self):
        return (self.next_u64() >> 11) * (2.0**-53)

    def next_normal(self):
        if self.spare is not None:
            value, self.spare = self.spare, None
            return value
        u1 = self.next_double()
        while u1 <= 0.0:
            u1 = self.next_double()
        u2 = self.next_double()
        radius = math.sqrt(-2.0 * math.log(u1))
        angle = 2.0 * math.pi * u2
        self.spare = radius * math.sin(angle)
        return radius * math.cos(angle)


# ---- data (docs/data.md)


def read_text_corpus(path):
    """The byte stream of a text file, or of every regular file below a folder."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read()
    files = []
    for dirpath, _, names in os.walk(path):  # folders reached through symlinks are not entered
        for name in names:
            full = os.path.join(dirpath, name)
            if os.path.isfile(full):  # follows symlinks to files
                files.append(os.path.relpath(full, path))
    files.sort(key=lambda rel: rel.replace(os.sep, "/").encode())
    seen, data = set(), bytearray()
    for rel in files:
        real = os.path.realpath(os.path.join(path, rel))
        if real in seen:
            continue  # a file reached twice is read once, at its first place
        seen.add(real)
        with open(real, "rb") as f:
            data += f.read()
    return bytes(data)


def sample_start(seed, step, index, num_tokens, seq_len):
    """First token of sequence `index` of step `step` (0-based)."""
    return Rng.for_stream(seed, (DATA_STREAM, step, index)).next_below(num_tokens - seq_len)


def batch_windows(seed, step, batch_size, num_tokens, seq_len):
    return [sample_start(seed, step, i, num_tokens, seq_len) for i in range(batch_size)]


# ---- initialisation (docs/model.md)


def normal_values(seed, layer_index, param_index, count, std):
    """`count` values of N(0, std) from the stream (seed, layer, param), row-major, in double
    (the caller rounds them to f32)."""
    rng = Rng.for_stream(seed, (layer_index, param_index))
    return [rng.next_normal() * std for _ in range(count)]


def gpt_init_plan(vocab_size, context, num_layers, width):
    """(name, shape, init, layer_index, param_index) of every GPT-2 parameter, in Baton's
    params() order; init is "normal", "proj" (0.02/sqrt(2L)), "ones" or "zeros"."""
    c = width
    plan = [
        ("wte.weight", (vocab_size, c), "normal", 0, 0),
        ("wpe.weight", (context, c), "normal", 0, 1),
    ]
    block = [
        ("ln_1.weight", (c,), "ones"),
        ("ln_1.bias", (c,), "zeros"),
        ("attn.c_attn.weight", (c, 3 * c), "normal"),
        ("attn.c_attn.bias", (3 * c,), "zeros"),
        ("attn.c_proj.weight", (c, c), "proj"),
        ("attn.c_proj.bias", (c,), "zeros"),
        ("ln_2.weight", (c,), "ones"),
        ("ln_2.bias", (c,), "zeros"),
        ("mlp.c_fc.weight", (c, 4 * c), "normal"),
        ("mlp.c_fc.bias", (4 * c,), "zeros"),
        ("mlp.c_proj.weight", (4 * c, c), "proj"),
        ("mlp.c_proj.bias", (c,), "zeros"),
    ]
    for i in range(num_layers):
        for j, (name, shape, init) in enumerate(block):
            plan.append((f"h.{i}.{name}", shape, init, i + 1, j))
    plan.append(("ln_f.weight", (c,), "ones", num_layers + 1, 0))
    plan.append(("ln_f.bias", (c,), "zeros", num_layers + 1, 1))
    return plan


def init_std(init, num_layers):
    return INIT_STD / math.sqrt(2.0 * num_layers) if init == "proj" else INIT_STD


def learning_rate(step, lr, min_lr, warmup_steps, total_steps, cosine):
    """The lr of 1-based `step`: linear warmup, then cosine to min_lr (or constant)."""
    if warmup_steps > 0 and step <= warmup_steps:
        return lr * step / warmup_steps
    if not cosine:
        return lr
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
