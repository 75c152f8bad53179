#!/usr/bin/env python3
"""tvm_feasibility.py: TVM's feasibility verdicts on samples of CUDA design
spaces, written once as test data for dragon's tests.

A verdict: a sampled trace (a sketch of the design space with every
decision drawn), EnterPostproc, then TVM's CUDA tensor-core postprocessors
for target sm_90 (tvm_spaces.TARGET): accepted, or rejected by the first
postprocessor that refuses (an exception counts as a refusal, as in TVM's
SampleInitPopulation).

For each workload (a dragon workload spec; the 13 MetaSchedule test
workloads C1D ... TBG as config 0 of TVM's te_workload, the others built
here with te / topi from the spec's meaning) it writes
tests/data/tvm_feasibility/<name>.json:

  {"workload": dragon spec, "tvm": version, "target": ...,
   "kernel": {"params": ["A:f32[63,1000]", ...],
              "blocks": ["T_softmax_maxelem(S63,R1000)", ...]},
   "sketches": {"tvm": [trace JSON, ...], "dragon": [trace JSON, ...]},
   "samples": [{"from": "tvm"|"dragon", "sketch": k,
                "decisions": [[inst, decision], ...],
                "tvm": "accepted" | postprocessor name | "replay:" message}]}

"kernel" is the identity of TVM's PrimFunc (parameters, then every block
with its iteration kinds and extents, in order) that dragon's kernel of the
spec must have. A sample is its sketch's instructions with those decisions.
TVM's samples: N of TVM's own design space, drawn as SampleInitPopulation
draws them (sketch uniform, decisions by TVM's random); dragon's samples:
N lines of `dragon sample SPEC --space-only --count N --seed 1` replayed
in TVM; "sketches"."dragon" holds their distinct instruction lists (a
replayed sample may record other steps than its sketch as generated).
Traces are in dragon's spelling (tvm_spaces.trace_json).

Needs `pip install apache-tvm psutil` (checked with apache-tvm 0.27.0.post1)
and a built ./build/dragon.
Usage: python3 scripts/tvm_feasibility.py [--count N] [--dragon build/dragon] [NAME ...]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tvm_spaces  # noqa: E402

# name -> dragon spec. The 13 test workloads are their aliases (config 0).
WORKLOADS = {a: a + "/0" for a in tvm_spaces.ALIASES}
WORKLOADS.update({
    "gemm_127x257x63_tb": "gemm:m=127,n=257,k=63,trans_a=0,trans_b=1,dtype=f32",
    "gemm_1024x1000x513": "gemm:m=1024,n=1000,k=513,trans_a=0,trans_b=0,dtype=f32",
    "bmm_3x63x63x127": "batch_matmul:b=3,n=63,m=63,k=127,dtype=f32",
    "tbmm_97x7x63": "transpose_batch_matmul:batch=1,seq=97,heads=7,dim=63,dtype=f32",
    "conv1d_97_33_65": "conv1d_nlc:n=1,l=97,ci=33,co=65,kernel=3,stride=1,pad=1,dilation=1,"
                       "groups=1,dtype=f32",
    "conv2d_7x7_20_416": "conv2d_nhwc:n=1,h=7,w=7,ci=20,co=416,kernel=3,stride=1,pad=1,"
                         "dilation=1,groups=1,dtype=f32",
    "conv2d_63x63_31_67_s2": "conv2d_nhwc:n=2,h=63,w=63,ci=31,co=67,kernel=5,stride=2,pad=2,"
                             "dilation=1,groups=1,dtype=f32",
    "conv2d_grp3_28x28_96": "conv2d_nhwc:n=1,h=28,w=28,ci=96,co=96,kernel=3,stride=1,pad=1,"
                            "dilation=1,groups=3,dtype=f32",
    "conv2d_dil2_31x31_64_127": "conv2d_nhwc:n=1,h=31,w=31,ci=64,co=127,kernel=3,stride=1,"
                                "pad=2,dilation=2,groups=1,dtype=f32",
    "conv3d_7x15x15_17_33": "conv3d_ndhwc:n=1,d=7,h=15,w=15,ci=17,co=33,kernel=3,stride=1,"
                            "pad=1,dilation=1,groups=1,dtype=f32",
    "dep_63x63_320_k5": "depthwise_conv2d_nhwc:n=16,h=63,w=63,c=320,kernel=5,stride=1,pad=2,"
                        "dilation=1,dtype=f32",
    "dep_7x7_1023": "depthwise_conv2d_nhwc:n=1,h=7,w=7,c=1023,kernel=3,stride=1,pad=1,"
                    "dilation=1,dtype=f32",
    "t2d_7x7_127_63": "conv2d_transpose_nhwc:n=1,h=7,w=7,ci=127,co=63,kernel=3,stride=2,pad=1,"
                      "dtype=f32",
    "cbr_15x15_33_127": "conv2d_bias_bn_relu:n=1,h=15,w=15,ci=33,co=127,kernel=3,stride=1,"
                        "pad=1,dilation=1,dtype=f32",
    "softmax_63x1000": "softmax:m=63,n=1000,dtype=f32",
    "layernorm_63x1000": "layernorm:m=63,n=1000,dtype=f32",
    "rmsnorm_97x4097": "rmsnorm:m=97,n=4097,dtype=f32",
    "maxpool_63x63_63": "max_pool2d:n=1,c=63,h=63,w=63,kernel=3,stride=2,pad=1,dtype=f32",
    "avgpool_31x31_17": "avg_pool2d:n=2,c=17,h=31,w=31,kernel=3,stride=2,pad=1,dtype=f32",
    "norm_7x63x63": "norm_bmn:b=7,m=63,n=63,dtype=f32",
    "bias_gelu_63x3071": "bias_gelu:m=63,n=3071,dtype=f32",
    "reduce_sum_1023x127": "reduce_sum:m=1023,n=127,dtype=f32",
})


def spec_args(spec):
    family, _, rest = spec.partition(":")
    kv = dict(p.split("=") for p in rest.split(","))
    return family, {k: (v if k == "dtype" else int(v)) for k, v in kv.items()}


def te_tensors(spec):
    """The workload's te tensors (inputs..., outputs), from the spec's meaning."""
    from tvm import te, topi
    from tvm.s_tir.meta_schedule.testing import te_workload as tw

    family, a = spec_args(spec)
    assert a.get("dtype", "f32") == "f32", "only f32 workloads here"
    g = a.get
    if family == "gemm":
        m, n, k = a["m"], a["n"], a["k"]
        A = te.placeholder((k, m) if g("trans_a") else (m, k), name="A")
        B = te.placeholder((n, k) if g("trans_b") else (k, n), name="B")
        r = te.reduce_axis((0, k), name="k")
        C = te.compute((m, n), lambda i, j: te.sum(
            (A[r, i] if g("trans_a") else A[i, r]) * (B[j, r] if g("trans_b") else B[r, j]),
            axis=[r]), name="C")
        return A, B, C
    if family == "batch_matmul":
        return tw.batch_matmul_nkkm(a["b"], a["n"], a["m"], a["k"])
    if family == "transpose_batch_matmul":
        return tw.transpose_batch_matmul(a["batch"], a["seq"], a["heads"], a["dim"])
    if family == "conv1d_nlc":
        return tw.conv1d_nlc(a["n"], a["l"], a["ci"], a["co"], a["kernel"], a["stride"],
                             a["pad"], a["dilation"], a["groups"])
    if family == "conv2d_nhwc":
        return tw.conv2d_nhwc(a["n"], a["h"], a["w"], a["ci"], a["co"], a["kernel"],
                              a["stride"], a["pad"], a["dilation"], a["groups"])
    if family == "conv3d_ndhwc":
        return tw.conv3d_ndhwc(a["n"], a["d"], a["h"], a["w"], a["ci"], a["co"], a["kernel"],
                               a["stride"], a["pad"], a["dilation"], a["groups"])
    if family == "depthwise_conv2d_nhwc":
        return tw.depthwise_conv2d_nhwc(a["n"], a["h"], a["w"], a["c"], a["kernel"],
                                        a["stride"], a["pad"], a["dilation"])
    if family == "conv2d_transpose_nhwc":
        return tw.conv2d_transpose_nhwc(a["n"], a["h"], a["w"], a["ci"], a["co"], a["kernel"],
                                        a["stride"], a["pad"])
    if family == "conv2d_bias_bn_relu":
        return tw.conv2d_nhwc_bn_relu(a["n"], a["h"], a["w"], a["ci"], a["co"], a["kernel"],
                                      a["stride"], a["pad"], a["dilation"])
    if family == "norm_bmn":
        return tw.norm_bmn(a["b"], a["m"], a["n"])
    if family == "softmax":
        return tw.softmax_mn(a["m"], a["n"])
    if family in ("max_pool2d", "avg_pool2d"):
        X = te.placeholder((a["n"], a["c"], a["h"], a["w"]), name="X")
        p = a["pad"]
        Y = topi.nn.pool2d(X, [a["kernel"]] * 2, [a["stride"]] * 2, [1, 1], [p] * 4,
                           "max" if family == "max_pool2d" else "avg", count_include_pad=True)
        return X, Y
    if family == "reduce_sum":
        A = te.placeholder((a["m"], a["n"]), name="A")
        return A, topi.sum(A, axis=1)
    if family in ("layernorm", "rmsnorm"):
        m, n = a["m"], a["n"]
        A = te.placeholder((m, n), name="A")
        if family == "rmsnorm":
            w = te.placeholder((n,), name="weight")
            k = te.reduce_axis((0, n), name="k")
            sq = te.compute((m,), lambda ax0: te.sum(A[ax0, k] * A[ax0, k], axis=[k]),
                            name="T_sq_sum")
            out = te.compute((m, n), lambda i, j: A[i, j] * te.rsqrt(
                sq[i] / float(n) + 1e-5) * w[j], name="T_rms_norm")
            return A, w, out
        gamma = te.placeholder((n,), name="gamma")
        beta = te.placeholder((n,), name="beta")
        k = te.reduce_axis((0, n), name="k")
        mean = te.compute((m,), lambda ax0: te.sum(A[ax0, k], axis=[k]), name="T_mean_sum")
        k2 = te.reduce_axis((0, n), name="k")
        var = te.compute((m,), lambda ax0: te.sum(
            (A[ax0, k2] - mean[ax0] / float(n)) * (A[ax0, k2] - mean[ax0] / float(n)),
            axis=[k2]), name="T_var_sum")
        out = te.compute((m, n), lambda i, j: (A[i, j] - mean[i] / float(n)) * te.rsqrt(
            var[i] / float(n) + 1e-5) * gamma[j] + beta[j], name="T_layer_norm")
        return A, gamma, beta, out
    if family == "bias_gelu":
        m, n = a["m"], a["n"]
        A = te.placeholder((m, n), name="A")
        bias = te.placeholder((n,), name="bias")
        t = te.compute((m, n), lambda ax0, ax1: A[ax0, ax1] + bias[ax1], name="T_add")
        out = te.compute((m, n), lambda ax0, ax1: t[ax0, ax1] * 0.5 * (
            1.0 + te.erf(t[ax0, ax1] * 0.70710677)), name="T_gelu")
        return A, bias, out
    raise SystemExit(f"tvm_feasibility.py: no TVM builder for family {family}")


def tvm_mod(name, spec):
    from tvm import te
    from tvm.s_tir.meta_schedule.testing.te_workload import create_te_workload

    if name in tvm_spaces.ALIASES:
        return create_te_workload(name, 0)
    return te.create_prim_func(list(te_tensors(spec)))


DTYPES = {"float32": "f32", "float16": "f16"}


def kernel_identity(mod):
    """Parameters and blocks of TVM's PrimFunc, in dragon's terms."""
    import tvm
    from tvm.s_tir import Schedule

    f = mod["main"] if isinstance(mod, tvm.IRModule) else mod
    params, used = [], set()
    for p in f.params:
        b = f.buffer_map[p] if hasattr(f, "buffer_map") else p  # TVM >= 0.24: buffers
        name, k = b.name, 0
        while name in used:  # the printer's (and dragon's) first free suffix
            k += 1
            name = f"{b.name}_{k}"
        used.add(name)
        params.append(f"{name}:{DTYPES[str(b.dtype)]}[{','.join(str(int(s)) for s in b.shape)}]")
    sch = Schedule(f)
    blocks = []
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        b = sch.get(rv)
        its = ",".join(("S" if iv.iter_type == 0 else "R") + str(int(iv.dom.extent))
                       for iv in b.iter_vars)
        blocks.append(f"{b.name_hint}({its})")
    return {"params": params, "blocks": blocks}


def verdict(mod, target, insts, decisions, postprocs):
    """TVM's verdict on a sample: the sketch's instructions with these decisions."""
    from tvm.s_tir import Schedule, Trace

    sch = Schedule(mod)
    try:
        Trace(insts, decisions).apply_to_schedule(sch, remove_postproc=True)
    except Exception as e:  # noqa: BLE001
        return "replay: " + str(e).strip().splitlines()[-1][:200]
    sch.enter_postproc()
    for p in postprocs:
        try:
            ok = p.apply(sch)
        except Exception:  # noqa: BLE001 (TVM counts an exception as a rejection)
            ok = False
        if not ok:
            return type(p).__name__
    return "accepted"


def dragon_lines(dragon, spec, *args):
    out = subprocess.run([dragon, "sample", spec, *args], check=True, capture_output=True,
                         text=True).stdout
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def replay_json(mod, tj):
    """Replays a dragon-spelled trace JSON on a fresh schedule (instructions only)."""
    from tvm.s_tir import Schedule, Trace

    insts = [["GetSBlock" if k == "GetBlock" else k, i, a, o] for k, i, a, o in tj[0]]
    sch = Schedule(mod)
    Trace.apply_json_to_schedule([insts, tj[1]], sch)
    return sch


def doc_of(name, spec, count, dragon, target, seed):
    import tvm
    from tvm.s_tir import Schedule, Trace
    from tvm.s_tir import meta_schedule as ms

    mod = tvm_mod(name, spec)
    mod = tvm.IRModule({"main": mod}) if not isinstance(mod, tvm.IRModule) else mod
    ctx = ms.TuneContext(mod=mod, target=target,
                         space_generator=ms.space_generator.PostOrderApply(
                             sch_rules=tvm_spaces.rules(),
                             postprocs=ms.Postproc.create("cuda-tensorcore"), mutator_probs={}),
                         task_name=name, rand_state=seed)
    spaces = ctx.generate_design_space()
    postprocs = ctx.space_generator.postprocs
    tvm_sk = [tvm_spaces.trace_json(s.trace) for s in spaces]
    samples = []
    rng = random.Random(seed)
    t0 = time.time()
    for i in range(count):
        k = rng.randrange(len(spaces))
        sch = Schedule(mod, seed=seed * 100003 + i + 1)
        Trace(spaces[k].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        tj = tvm_spaces.trace_json(sch.trace)
        assert tj[0] == tvm_sk[k][0], "a sample's instructions are its sketch's"
        v = verdict(mod, target, sch.trace.insts, sch.trace.decisions, postprocs)
        samples.append({"from": "tvm", "sketch": k, "decisions": tj[1], "tvm": v})
    t1 = time.time()
    dragon_sk, shapes = [], []
    for tj in dragon_lines(dragon, spec, "--space-only", "--count", str(count), "--seed",
                           str(seed)):
        if json.dumps(tj[0]) not in shapes:
            shapes.append(json.dumps(tj[0]))
            dragon_sk.append([tj[0], []])
        k = shapes.index(json.dumps(tj[0]))
        try:
            sch = replay_json(mod, tj)
            v = verdict(mod, target, sch.trace.insts, sch.trace.decisions, postprocs)
        except Exception as e:  # noqa: BLE001
            v = "replay: " + str(e).strip().splitlines()[-1][:200]
        samples.append({"from": "dragon", "sketch": k, "decisions": tj[1], "tvm": v})
    print(f"  {name}: TVM's samples {t1 - t0:.1f} s, dragon's {time.time() - t1:.1f} s",
          file=sys.stderr)
    return {"workload": spec, "tvm": tvm.__version__, "target": tvm_spaces.TARGET,
            "kernel": kernel_identity(mod),
            "sketches": {"tvm": tvm_sk, "dragon": dragon_sk}, "samples": samples}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "data", "tvm_feasibility"))
    ap.add_argument("--count", type=int, default=40, help="samples a side (TVM's, dragon's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dragon", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                     "dragon"))
    ap.add_argument("names", nargs="*", default=list(WORKLOADS))
    a = ap.parse_args()
    try:
        import tvm
        import tvm.s_tir.tensor_intrin.cuda  # noqa: F401 (registers the WMMA intrinsics)
    except ImportError as e:
        sys.exit(f"tvm_feasibility.py: TVM with s_tir.meta_schedule is needed ({e}); "
                 "pip install apache-tvm psutil")
    os.makedirs(a.out, exist_ok=True)
    target = tvm.target.Target(tvm_spaces.TARGET)
    for name in a.names:
        spec = subprocess.run([a.dragon, "workloads", "--canonical", WORKLOADS[name]],
                              check=True, capture_output=True, text=True).stdout.strip()
        doc = doc_of(name, spec, a.count, a.dragon, target, a.seed)
        path = os.path.join(a.out, name + ".json")
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        acc = {s: sum(1 for x in doc["samples"] if x["from"] == s and x["tvm"] == "accepted")
               for s in ("tvm", "dragon")}
        print(f"{name}: {len(doc['samples'])} samples, TVM accepts {acc['tvm']} of TVM's, "
              f"{acc['dragon']} of dragon's -> {path}", flush=True)


if __name__ == "__main__":
    main()
