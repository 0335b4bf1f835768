"""A stack of PyTorch nn.Linear layers run through pyamx: weights packed once, activations by DLPack.

    python examples/linear.py [--layers 6] [--batch 4] [--seq 64] [--hidden 384] [--out float32|bf16]
                              [--backend auto|emulator|native] [--rounds 3]

A small transformer-shaped feed-forward model (per layer: the four attention projections and the
two MLP matrices of a MiniLM-sized encoder, with GELU and residuals; no attention itself, which
is not a matmul of weights) runs three ways in one process:

* torch float32, the reference;
* torch bf16 autocast, what a PyTorch user gets from AMX today (oneDNN; bf16 out);
* pyamx: each nn.Linear swapped for :class:`PyamxLinear`, which packs its weight once
  (``pyamx.pack``) and hands the activations to ``pyamx.matmul`` in place through DLPack.

It prints each way's time per forward and its error against float64, and (``--check``) runs the
pyamx model on the emulator too and compares every layer's output bit for bit. torch is needed
for this example only: pyamx never depends on it.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

try:
    import torch
except ImportError:
    sys.exit("examples/linear.py needs PyTorch (pip install torch); pyamx itself does not")

import pyamx


class PyamxLinear(torch.nn.Module):
    """``nn.Linear``'s forward through pyamx: ``x @ W.T + bias`` with W packed once as bf16.

    The weight is rounded once to bf16 (nearest even) and laid out in the tile layout at
    construction; every call reads the activations in place (a bf16 tensor through DLPack) and
    starts each output's float32 chain from its bias (the accumulator ``c``), so a bf16 output
    is rounded once, after the bias.
    """

    def __init__(self, linear: torch.nn.Linear, *, out: str = "float32", backend: str | None = None):
        super().__init__()
        weight_t = linear.weight.detach().to(torch.bfloat16).t().contiguous()  # (in, out): the right operand
        self.packed = pyamx.pack(weight_t)  # a torch.bfloat16 tensor, read through DLPack
        self.bias = None if linear.bias is None else linear.bias.detach().float().numpy()
        self.out = out
        self.backend = backend
        self.last = None  # the last result, with its labels (which backend ran)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if x.dtype != torch.bfloat16:
            x = x.to(torch.bfloat16)  # torch's own RNE conversion: the same bits as pyamx's
        c = None if self.bias is None else np.broadcast_to(self.bias, tuple(x.shape[:-1]) + self.bias.shape)
        result = pyamx.matmul(x, self.packed, c, backend=self.backend,
                              out_dtype="bf16" if self.out == "bf16" else None)
        self.last = result
        bits = np.asarray(result)
        return (torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16) if self.out == "bf16"
                else torch.from_numpy(bits))


class Block(torch.nn.Module):
    """One encoder layer's weight matrices in sequence (q, k, v, o, then the MLP), with residuals."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
        self.up = torch.nn.Linear(hidden, ffn)
        self.down = torch.nn.Linear(ffn, hidden)

    def forward(self, x):
        # q, k, v feed attention in a real encoder; here their sum stands in for it
        mixed = self.q(x) + self.k(x) + self.v(x)
        x = x + self.o(mixed) / 3
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def model(layers: int, hidden: int, seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*(Block(hidden, 4 * hidden) for _ in range(layers))).eval()


def swap_linears(net: torch.nn.Module, **options) -> list:
    """Every nn.Linear of ``net`` replaced by a PyamxLinear (in place); the new modules in order."""
    swapped = []
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                new = PyamxLinear(child, **options)
                setattr(parent, name, new)
                swapped.append(new)
    return swapped


def best_time(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--out", choices=("float32", "bf16"), default="float32")
    p.add_argument("--backend", choices=("auto", "emulator", "native"), default="auto")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--check", action="store_true", help="also run on the emulator and compare bit for bit")
    args = p.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend

    reference = model(args.layers, args.hidden, seed=0)
    x = torch.randn(args.batch, args.seq, args.hidden, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = reference.double()(x.double()).float()
        reference.float()
        ours = model(args.layers, args.hidden, seed=0)
        linears = swap_linears(ours, out=args.out, backend=backend)
        x16 = x.to(torch.bfloat16)

        def run_torch32():
            return reference(x)

        def run_autocast():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return reference(x16)

        def run_pyamx():
            return ours(x16)

        outputs = {name: fn().float() for name, fn in
                   (("torch float32", run_torch32), ("torch bf16 autocast", run_autocast), ("pyamx", run_pyamx))}
        times = {name: best_time(fn, args.rounds) for name, fn in
                 (("torch float32", run_torch32), ("torch bf16 autocast", run_autocast), ("pyamx", run_pyamx))}

    ran = linears[0].last
    print(f"{len(linears)} nn.Linear layers, activations {args.batch}x{args.seq}x{args.hidden}, "
          f"pyamx: {ran.backend} {ran.native_mode or ran.engine}, out={args.out}, torch {torch.__version__}")
    scale = float(exact.abs().max())
    print(f"{'':22} {'ms/forward':>10} {'vs autocast':>12} {'max |err|/max|y|':>17}")
    for name, seconds in times.items():
        err = float((outputs[name] - exact).abs().max()) / scale
        print(f"{name:22} {seconds * 1e3:10.2f} {seconds / times['torch bf16 autocast']:11.2f}x {err:17.3e}")
    if args.check:
        mine = [np.asarray(m.last).copy() for m in linears]
        for m in linears:
            m.backend = "emulator"
        with torch.no_grad():
            ours(x16)
        same = all(np.array_equal(a.view(np.uint8), np.asarray(m.last).view(np.uint8)) for a, m in zip(mine, linears))
        print(f"every layer's output bit-identical to the emulator's: {same}")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
