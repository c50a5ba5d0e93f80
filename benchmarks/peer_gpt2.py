"""Peer baseline (check env only): GPT-2 trained the way a user would without Megatron:
plain PyTorch, bf16 autocast, SDPA flash attention, torch.compile, fused AdamW.
Prints steady tokens/s and MFU for the same global batch as the zerolab recipes."""

# Provenance: the team's GPU kit (peer_gpt2.py, measured on one H100 80 GB HBM3: 124M micro 16
# 470,610 tokens/s, 1.5B micro 4 38,622 tokens/s). Copied here so that benchmarks/gpu_vs_peer.py
# can drive it; the model, the training step and the measurement are the kit's. zerolab's
# changes: reformatted for the linters; options --device cpu (no compile, fused AdamW or
# autocast there), --global-batch, --warmup-steps and --steps, and a `tiny` shape (zerolab's
# gpt2-tiny, sequence 128), so that the benchmark's CPU test runs it; the JSON line also names
# the device and torch. Without options it measures exactly what the kit's file does.
#
#   python3 benchmarks/peer_gpt2.py 124m|1.5b|tiny MICRO [ckpt] [--device cpu] [--global-batch N]

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"124m": (12, 768, 12, 1024), "1.5b": (48, 1600, 25, 1024), "tiny": (2, 64, 4, 128)}
"""layers, hidden size, heads, sequence length"""
V = 50304

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("model", choices=SHAPES)
parser.add_argument("micro", type=int)
parser.add_argument("ckpt", nargs="?", choices=["ckpt"], help="recompute every block (checkpointing)")
parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
parser.add_argument("--global-batch", type=int, default=32)
parser.add_argument("--warmup-steps", type=int, default=3)
parser.add_argument("--steps", type=int, default=10)
options = parser.parse_args()
L, H, NH, SEQ = SHAPES[options.model]
MICRO, GLOBAL, CKPT, DEVICE = options.micro, options.global_batch, options.ckpt == "ckpt", options.device
GPU = DEVICE == "cuda"


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1 = nn.LayerNorm(H)
        s.qkv = nn.Linear(H, 3 * H)
        s.proj = nn.Linear(H, H)
        s.ln2 = nn.LayerNorm(H)
        s.fc = nn.Linear(H, 4 * H)
        s.out = nn.Linear(4 * H, H)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, 2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(V, H)
        s.wpe = nn.Embedding(SEQ, H)
        s.blocks = nn.ModuleList(Block() for _ in range(L))
        s.lnf = nn.LayerNorm(H)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) if CKPT else b(x)
        return F.cross_entropy((s.lnf(x) @ s.wte.weight.T).float().view(-1, V), tgt.reshape(-1))


torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
m = GPT().to(DEVICE)
n = sum(p.numel() for p in m.parameters())
opt = torch.optim.AdamW(m.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=GPU)
cm = torch.compile(m) if GPU else m
x = torch.randint(0, V, (MICRO, SEQ + 1), device=DEVICE)


def step():
    for _ in range(GLOBAL // MICRO):
        with torch.autocast(DEVICE, torch.bfloat16, enabled=GPU):
            loss = cm(x[:, :-1], x[:, 1:])
        loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def synchronize():
    if GPU:
        torch.cuda.synchronize()


for _ in range(options.warmup_steps):
    step()
synchronize()
if GPU:
    torch.cuda.reset_peak_memory_stats()
t = time.time()
N = options.steps
for _ in range(N):
    step()
synchronize()
dt = (time.time() - t) / N
tok = GLOBAL * SEQ / dt
flops_tok = 6 * n + 12 * L * H * SEQ
print(
    json.dumps(
        {
            "peer": "pytorch-compile-sdpa" if GPU else "pytorch-sdpa-cpu",
            "model": options.model,
            "micro": MICRO,
            "ckpt": CKPT,
            "params": n,
            "ms_per_iter": round(dt * 1e3, 1),
            "tokens_per_s": round(tok),
            "mfu_vs_989": round(tok * flops_tok / 989e12, 4) if GPU else None,
            "max_alloc_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if GPU else None,
            "device": torch.cuda.get_device_name() if GPU else "cpu",
            "torch": torch.__version__,
            "global_batch": GLOBAL,
            "seq_length": SEQ,
        }
    ),
    flush=True,
)
