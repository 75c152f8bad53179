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

With --shared-bytes it writes tests/data/tvm_shared/<ALIAS>.json instead:
for every postprocessed trace (the same ones, drawn again from the same
seeds), the shared memory TVM's VerifyGPUCode sees, lowering with that
postprocessor's pass list: {"workload", "tvm", "samples": [{"sketch": k,
"trace": trace JSON, "pipelined": 0/1, "shared_bytes": bytes after
InjectSoftwarePipeline, "shared_bytes_unpipelined": bytes with that pass
left out, "allocs": [[name, scope, bytes], ...]}, ...]} (dragon's tests
compare its multi-buffered allocations with these).

Needs `pip install apache-tvm psutil` (checked with apache-tvm 0.27.0.post1).
Usage: python3 scripts/tvm_spaces.py [--out tests/data/tvm_spaces] [--shared-bytes] [ALIAS ...]
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


def verify_gpu_passes(pipeline=True):
    """MetaSchedule's VerifyGPUCode pass list (postproc/verify_gpu_code.cc)."""
    import tvm.s_tir.transform as st
    import tvm.tirx.transform as tt

    out = [st.LowerCrossThreadReduction(), st.LowerInitBlock(),
           st.PlanAndUpdateBufferAllocationLocation(), st.ConvertBlocksToOpaque(),
           st.LiftThreadBinding(), st.ManifestSharedMemoryLocalStage(),
           st.CompactBufferAllocation(), tt.StmtSimplify(), st.LowerAutoCopy(),
           st.UnifyThreadBinding(), st.LowerMatchBuffer()]
    if pipeline:
        out.append(st.InjectSoftwarePipeline())
    out += [st.LowerOpaqueBlock(), tt.FlattenBuffer(), tt.BF16ComputeLegalize(),
            tt.NarrowDataType(32), tt.StmtSimplify(), tt.VectorizeLoop(True),
            st.InjectVirtualThread(), st.InjectDoubleBuffer(), tt.StorageRewrite(),
            st.MergeSharedMemoryAllocations()]
    return out


DTYPE_BITS = {"float32": 32, "float16": 16, "float64": 64, "int8": 8, "uint8": 8,
              "int32": 32, "int64": 64}


def shared_allocs(mod, target, pipeline):
    """[name, scope, bytes] of the shared allocations of the lowered kernel."""
    import re
    import tvm

    f = mod["main"].with_attr("global_symbol", "main").with_attr("target", target)
    f = f.with_attr("tir.noalias", True)
    m = tvm.transform.Sequential(verify_gpu_passes(pipeline))(tvm.IRModule({"main": f}))
    text = m["main"].script()
    out = []
    pat = r'(\w+) = T\.alloc_shared\(\((\d+),\)(?:, "(\w+)")?(?:, scope="([\w.]+)")?\)'
    for a in re.finditer(pat, text):
        out.append([a.group(1), a.group(4) or "shared",
                    int(a.group(2)) * DTYPE_BITS[a.group(3) or "float32"] // 8])
    pat = r'(\w+) = T\.allocate\(\[(\d+)\], "(\w+)", "(shared[.\w]*)"\)'
    for a in re.finditer(pat, text):
        out.append([a.group(1), a.group(4), int(a.group(2)) * DTYPE_BITS[a.group(3)] // 8])
    return out


def shared_bytes_doc(alias, mod, spaces, target):
    from tvm.s_tir import Schedule

    samples = []
    for k, sp in enumerate(spaces):
        trace, _ = postprocess(mod, sp.trace, target)
        if trace is None:
            continue
        sch = Schedule(mod)
        trace.apply_to_schedule(sch, remove_postproc=False)
        piped = shared_allocs(sch.mod, target, True)
        plain_ = shared_allocs(sch.mod, target, False)
        tj = trace_json(trace)
        samples.append({"sketch": k, "trace": tj,
                        "pipelined": int(any(i[0] == "Annotate" and
                                             i[2] == ["software_pipeline_stage"]
                                             for i in tj[0])),
                        "shared_bytes": sum(a[2] for a in piped),
                        "shared_bytes_unpipelined": sum(a[2] for a in plain_),
                        "allocs": piped})
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                  "tests", "data", "tvm_spaces"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shared-bytes", action="store_true",
                    help="write TVM's VerifyGPUCode shared bytes of each postprocessed sample")
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
    if a.shared_bytes and a.out.endswith("tvm_spaces"):
        a.out = a.out[: -len("tvm_spaces")] + "tvm_shared"
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
        if a.shared_bytes:
            doc = {"workload": alias + "/0", "tvm": tvm.__version__, "target": TARGET,
                   "samples": shared_bytes_doc(alias, mod, spaces, target)}
            path = os.path.join(a.out, alias + ".json")
            with open(path, "w") as f:
                json.dump(doc, f, separators=(",", ":"))
                f.write("\n")
            print(f"{alias}: {len(doc['samples'])} samples -> {path}")
            continue
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
