#!/usr/bin/env python3
"""tvm_spaces.py: TVM's own CUDA design spaces for MetaSchedule's 13 test
workloads, written once as trace JSON for dragon's tests.

For each alias C1D ... TBG (config 0, TVM's te_workload), it asks TVM's
PostOrderApply for the design space of target sm_90 (rule kind
"cuda-tensorcore", the rules dragon implements, with ParallelizeVectorizeUnroll's
unroll steps [0, 16, 64, 512, 1024] of TVM v0.18 - HEAD uses eight steps) and
writes tests/data/tvm_spaces/<ALIAS>.json: {"workload", "tvm", "target",
"sketches": [trace JSON, ...], "postprocessed": [trace JSON or null, ...],
"rejected_by": [postprocessor name or null, ...]}. A postprocessed trace is
a sample of its sketch as SampleInitPopulation makes one: decisions drawn
anew (TVM's random, seeds 1, 2, ... until one passes, at most 200 tries),
EnterPostproc, TVM's CUDA tensor-core postprocessors; null, with the last
postprocessor that rejected, where none passes. Each trace is TVM's trace
JSON in dragon's spelling: GetSBlock (TVM >= 0.24) written GetBlock, bools
as 0/1, FloatImm as plain numbers; the sketches keep the decisions TVM drew
while generating (--seed).

Needs `pip install apache-tvm psutil` (checked with apache-tvm 0.27.0.post1).
Usage: python3 scripts/tvm_spaces.py [--out tests/data/tvm_spaces] [ALIAS ...]
"""
import argparse
import json
import os
import sys

ALIASES = ["C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM", "GRP", "T2D",
           "NRM", "SFM", "CBR", "TBG"]
TARGET = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
          "thread_warp_size": 32, "max_shared_memory_per_block": 49152}
UNROLL_STEPS = [0, 16, 64, 512, 1024]


def plain(v):
    """TVM's JSON-ready objects to plain Python values in dragon's spelling."""
    from tvm.tirx import FloatImm, IntImm

    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, (int, float, str)):
        return v
    if isinstance(v, IntImm):
        return int(v.value)
    if isinstance(v, FloatImm):
        return float(v.value)
    if isinstance(v, (list, tuple)) or hasattr(v, "__len__") and not isinstance(v, dict):
        return [plain(x) for x in v]
    raise TypeError(f"unexpected value in trace JSON: {type(v).__name__} {v!r}")


def trace_json(trace):
    insts, decisions = trace.as_json()
    out = []
    for kind, inputs, attrs, outputs in insts:
        kind = str(kind)
        if kind == "GetSBlock":
            kind = "GetBlock"
        out.append([kind, plain(inputs), plain(attrs), [str(o) for o in outputs]])
    return [out, [[int(i), plain(d)] for i, d in decisions]]


def rules():
    from tvm.s_tir import meta_schedule as ms

    out = []
    for r in ms.ScheduleRule.create("cuda-tensorcore"):
        if type(r).__name__ == "ApplyCustomRule":
            continue  # dragon's kernels carry no custom rules
        if type(r).__name__ == "ParallelizeVectorizeUnroll":
            r = ms.schedule_rule.ParallelizeVectorizeUnroll(
                max_jobs_per_core=-1, max_vectorize_extent=-1,
                unroll_max_steps=UNROLL_STEPS, unroll_explicit=True)
        out.append(r)
    return out


def postprocess(mod, trace, target, tries=200):
    """A sample of the sketch: decisions drawn anew, then TVM's postprocessors."""
    from tvm.s_tir import Schedule, Trace
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=mod, target=target, task_name="post",
                         space_generator=ms.space_generator.PostOrderApply(
                             sch_rules=[], postprocs=ms.Postproc.create("cuda-tensorcore"),
                             mutator_probs={}))
    bare = Trace(trace.insts, {})
    who = None
    for seed in range(1, tries + 1):
        sch = Schedule(mod, seed=seed)
        bare.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        who = None
        for p in ctx.space_generator.postprocs:
            try:
                ok = p.apply(sch)
            except Exception:  # TVM counts an exception as a rejection too
                ok = False
            if not ok:
                who = type(p).__name__
                break
        if who is None:
            return sch.trace, None
    return None, who


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                  "tests", "data", "tvm_spaces"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("aliases", nargs="*", default=ALIASES)
    a = ap.parse_args()
    try:
        import tvm
        import tvm.s_tir.tensor_intrin.cuda  # noqa: F401 (registers the WMMA intrinsics)
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.meta_schedule.testing.te_workload import create_te_workload
    except ImportError as e:
        sys.exit(f"tvm_spaces.py: TVM with s_tir.meta_schedule is needed ({e}); "
                 "pip install apache-tvm psutil")
    os.makedirs(a.out, exist_ok=True)
    target = tvm.target.Target(TARGET)
    for alias in a.aliases:
        mod = create_te_workload(alias, 0)
        ctx = ms.TuneContext(
            mod=mod, target=target,
            space_generator=ms.space_generator.PostOrderApply(
                sch_rules=rules(), postprocs=[], mutator_probs={}),
            task_name=alias, rand_state=a.seed)
        spaces = ctx.generate_design_space()
        post, rejected = [], []
        for sp in spaces:
            trace, who = postprocess(mod, sp.trace, target)
            post.append(trace_json(trace) if trace is not None else None)
            rejected.append(who)
        doc = {"workload": alias + "/0", "tvm": tvm.__version__, "target": TARGET,
               "sketches": [trace_json(s.trace) for s in spaces],
               "postprocessed": post, "rejected_by": rejected}
        path = os.path.join(a.out, alias + ".json")
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(f"{alias}: {len(spaces)} sketches -> {path}")


if __name__ == "__main__":
    main()
