# Copied unchanged from the project's shared anchors (anchors/torch_llama_train.py) so that it
# travels to the GPU machine; scripts/gpu_model.sh runs it beside bench/train_bench.
# Anchor: what a user would run instead of a C trainer - a Llama-style decoder in
# PyTorch (bf16 autocast, fused AdamW, torch.compile) - tokens/s and MFU on the H200.
import json, math, os, time, torch, torch.nn as nn, torch.nn.functional as F
torch.backends.cuda.matmul.allow_tf32 = True
dev = "cuda"
class RMS(nn.Module):
    def __init__(s, d): super().__init__(); s.w = nn.Parameter(torch.ones(d))
    def forward(s, x): return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * s.w
def rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)
class Block(nn.Module):
    def __init__(s, d, h, kv, ff):
        super().__init__(); s.h, s.kv, s.hd = h, kv, d // h
        s.n1, s.n2 = RMS(d), RMS(d)
        s.q = nn.Linear(d, d, bias=False); s.k = nn.Linear(d, kv * s.hd, bias=False); s.v = nn.Linear(d, kv * s.hd, bias=False)
        s.o = nn.Linear(d, d, bias=False); s.g = nn.Linear(d, ff, bias=False); s.u = nn.Linear(d, ff, bias=False); s.dn = nn.Linear(ff, d, bias=False)
    def forward(s, x, cos, sin):
        B, T, C = x.shape; y = s.n1(x)
        q = s.q(y).view(B, T, s.h, s.hd); k = s.k(y).view(B, T, s.kv, s.hd); v = s.v(y).view(B, T, s.kv, s.hd)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
        x = x + s.o(a.transpose(1, 2).reshape(B, T, C)); y = s.n2(x)
        return x + s.dn(F.silu(s.g(y)) * s.u(y))
class LM(nn.Module):
    def __init__(s, V, d, L, h, kv, ff, T):
        super().__init__(); s.emb = nn.Embedding(V, d); s.blocks = nn.ModuleList([Block(d, h, kv, ff) for _ in range(L)])
        s.nf = RMS(d); s.head = nn.Linear(d, V, bias=False)
        hd = d // h; inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)); t = torch.arange(T).float()
        f = torch.outer(t, inv); s.register_buffer("cos", f.cos()[None, :, None, :]); s.register_buffer("sin", f.sin()[None, :, None, :])
    def forward(s, idx, tgt):
        x = s.emb(idx)
        for b in s.blocks: x = b(x, s.cos, s.sin)
        return F.cross_entropy(s.head(s.nf(x)).float().view(-1, s.head.out_features), tgt.view(-1))
rows = []
for name, V, d, L, h, kv, ff, B, T in (("25M", 8192, 384, 8, 6, 2, 1024, 64, 1024), ("125M", 8192, 768, 12, 12, 4, 2048, 32, 1024)):
    m = LM(V, d, L, h, kv, ff, T).to(dev); n = sum(p.numel() for p in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True); cm = torch.compile(m)
    x = torch.randint(0, V, (B, T), device=dev); y = torch.randint(0, V, (B, T), device=dev)
    def step():
        with torch.autocast("cuda", torch.bfloat16): loss = cm(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); return loss
    t0 = time.time()
    for _ in range(3): step()
    torch.cuda.synchronize(); ct = time.time() - t0
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True); e0.record(); N = 30
    for _ in range(N): step()
    e1.record(); torch.cuda.synchronize(); ms = e0.elapsed_time(e1) / N
    toks = B * T / (ms / 1e3); nonemb = n - V * d
    flops = 6 * n * B * T + 12 * L * d * T * B * T / 2  # 6N + causal attention
    r = {"model": name, "params": n, "batch": B, "seq": T, "ms_per_step": ms, "tokens_per_s": toks,
         "tflops": flops / (ms / 1e3) / 1e12, "mfu_vs_680": flops / (ms / 1e3) / 680e12, "compile_s": ct}
    rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "torch_llama_train.json"), "w"), indent=1)
