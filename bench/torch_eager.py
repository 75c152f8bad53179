# torch_eager.py: PyTorch eager and torch.compile latencies of the 13
# MetaSchedule workloads (config /0, fp32), the baseline that
# bench/hand_vs_torch.sh sets beside dragon's hand-written schedules.
#
# Adapted from /work/shared/anchors/torch_baselines.py: the same workloads
# and layouts (NHWC convolutions through permuted NCHW ones), TF32 off, the
# median of triton's do_bench (which flushes L2 before every run), plus CAP
# (the capsule convolution, which the anchors do not have). Where triton is
# missing, CUDA events around each run after writing a 256 MiB buffer
# (larger than the H200's L2) give the same measure.
#
# Prints one line per workload, `NAME eager_us compile_us` ("-" for a
# failed measure, with the reason on stderr), and writes the same rows as
# JSON to $OUT/torch_eager.json when OUT is set. Usage:
#   python3 bench/torch_eager.py [NAME ...]      (default: all 13)
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"

try:
    from triton.testing import do_bench

    def bench(fn):
        return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3  # us
except ImportError:
    _flush = None

    def bench(fn, reps=100):
        global _flush
        if _flush is None:
            _flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        for _ in range(10):
            fn()
        times = []
        for _ in range(reps):
            _flush.zero_()
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        return statistics.median(times)


def r(*s):
    return torch.randn(*s, device=dev, dtype=torch.float32)


def conv_nhwc(x, w, stride, pad, dil=1, groups=1):  # x NHWC, w OIHW
    return F.conv2d(x.permute(0, 3, 1, 2), w, stride=stride, padding=pad, dilation=dil,
                    groups=groups).permute(0, 2, 3, 1)


def capsule(x, w):
    # x (1, 16, 16, 4, 4, 32) NHWijc, w (3, 3, 4, 4, 32, 32) (kh, kw, k, j, c, o):
    # out[n,h,w,i,j,o] = sum_{kh,kw,k,c} pad(x)[n, 2h+kh, 2w+kw, i, k, c] * w[kh,kw,k,j,c,o]
    n, hh, ww = x.shape[:3]
    cols = F.unfold(x.reshape(n, hh, ww, -1).permute(0, 3, 1, 2), 3, padding=1, stride=2)
    cols = cols.reshape(n, 4, 4, 32, 3, 3, 8, 8)  # n i k c kh kw oh ow
    return torch.einsum("nikcabhw,abkjco->nhwijo", cols, w)


WORKLOADS = {
    "C1D": (lambda: (r(1, 64, 256), r(128, 64, 3)), lambda x, w: F.conv1d(x, w, stride=2, padding=1)),
    "C2D": (lambda: (r(1, 224, 224, 3), r(64, 3, 7, 7)), lambda x, w: conv_nhwc(x, w, 2, 3)),
    "C3D": (lambda: (r(1, 3, 16, 224, 224), r(64, 3, 7, 7, 7)), lambda x, w: F.conv3d(x, w, stride=2, padding=3)),
    "CAP": (lambda: (r(1, 16, 16, 4, 4, 32), r(3, 3, 4, 4, 32, 32)), capsule),
    "DEP": (lambda: (r(1, 112, 112, 32), r(32, 1, 3, 3)), lambda x, w: conv_nhwc(x, w, 1, 1, groups=32)),
    "DIL": (lambda: (r(1, 224, 224, 3), r(64, 3, 7, 7)), lambda x, w: conv_nhwc(x, w, 2, 3, dil=2)),
    "GMM": (lambda: (r(1, 128, 128), r(1, 128, 128)), lambda a, b: torch.bmm(a, b)),
    "GRP": (lambda: (r(1, 56, 56, 64), r(128, 16, 3, 3)), lambda x, w: conv_nhwc(x, w, 2, 1, groups=4)),
    "T2D": (lambda: (r(1, 512, 4, 4), r(512, 256, 4, 4)),
            lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1)),
    "NRM": (lambda: (r(1, 256, 256),), lambda x: torch.sqrt((x * x).sum(dim=(1, 2)))),
    "SFM": (lambda: (r(256, 256),), lambda x: torch.softmax(x, dim=-1)),
    "CBR": (lambda: (r(1, 224, 224, 3), r(64, 3, 7, 7), r(64), r(64), r(64)),
            lambda x, w, b, s, sh: torch.relu((conv_nhwc(x, w, 2, 3) + b) * s + sh)),
    "TBG": (lambda: (r(1, 128, 12, 64), r(1, 128, 12, 64)),
            lambda q, k: torch.matmul(q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1))),
}


def measure(name):
    make, fn = WORKLOADS[name]
    row = {"name": name, "eager_us": None, "compile_us": None}
    try:
        args = make()
        row["eager_us"] = bench(lambda: fn(*args))
    except Exception as e:  # a failed workload is reported, the others still run
        row["error"] = "eager: " + repr(e)[:200]
        return row
    try:
        cf = torch.compile(fn)
        t0 = time.time()
        cf(*args)
        torch.cuda.synchronize()
        row["compile_s"] = time.time() - t0
        row["compile_us"] = bench(lambda: cf(*args))
    except Exception as e:
        row["error"] = "compile: " + repr(e)[:200]
    return row


def main():
    names = sys.argv[1:] or list(WORKLOADS)
    rows = []
    for name in names:
        if name not in WORKLOADS:
            print(f"torch_eager.py: unknown workload {name}", file=sys.stderr)
            continue
        row = measure(name)
        rows.append(row)
        if "error" in row:
            print(f"torch_eager.py: {name}: {row['error']}", file=sys.stderr)
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"{name} {fmt(row['eager_us'])} {fmt(row['compile_us'])}", flush=True)
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "torch_eager.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
