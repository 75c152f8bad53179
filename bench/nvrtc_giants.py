#!/usr/bin/env python3
"""nvrtc_giants.py DB OUTDIR: what the largest candidate sources cost NVRTC
and what leaving them uncompiled would cost the labels.

DB is a tuning database merged from the committed shards (`dragon db merge
data/records --db DB`). Three measurements, on this machine, one compile at
a time (bench_nvrtc, rt_nvrtc_compile as the tuner compiles):

  1. SAMPLE records drawn at random (seed 7) among those measured on or
     after --since: their CUDA source (`dragon emit --target cuda`), its
     size and its NVRTC wall time. For each size limit, the share of the
     candidates above it and of the NVRTC time they took.
  2. Every labelled workload's best correct record: its source size. For
     each limit, the share of labels whose best is above it.
  3. For those workloads, the best correct record at or under the limit:
     how much slower than the best the label would have been.

Prints the tables (Markdown) and keeps every measured row in OUTDIR.
Needs DRAGON (default ./dragon) and BENCH (default build/bench_nvrtc).
"""
import json
import os
import random
import statistics
import subprocess
import sys

LIMITS_KB = [64, 128, 192, 256, 384]


def mean_secs(r):
    s = r.get("run_secs")
    return sum(s) / len(s) if s else None


def emit(dragon, spec, trace, path):
    tpath = path + ".json"
    with open(tpath, "w") as f:
        json.dump(trace, f)
    with open(path, "w") as out:
        rc = subprocess.call([dragon, "emit", spec, "--trace", tpath, "--target", "cuda"],
                             stdout=out, stderr=subprocess.DEVNULL)
    os.unlink(tpath)
    if rc != 0:
        os.unlink(path)
        return None
    return os.path.getsize(path)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    db, outdir = sys.argv[1], sys.argv[2]
    since = "2026-12-06"
    n_sample = 300
    for a in sys.argv[3:]:
        if a.startswith("--since="):
            since = a.split("=", 1)[1]
        elif a.startswith("--sample="):
            n_sample = int(a.split("=", 1)[1])
    dragon = os.environ.get("DRAGON", "./dragon")
    bench = os.environ.get("BENCH", "build/bench_nvrtc")
    os.makedirs(outdir + "/src", exist_ok=True)
    spec = {}
    for line in open(db + "/workloads.jsonl"):
        j = json.loads(line)
        spec[j["workload"]] = j["spec"]
    recs = {}
    recent = []
    for line in open(db + "/records.jsonl"):
        r = json.loads(line)
        if r["workload"] not in spec:
            continue
        recs.setdefault(r["workload"], []).append(r)
        if r.get("date", "") >= since:
            recent.append(r)

    # 1. the sample: sizes and NVRTC times
    random.seed(7)
    sample = random.sample(recent, min(n_sample, len(recent)))
    files = []
    for i, r in enumerate(sample):
        p = "%s/src/s%04d.cu" % (outdir, i)
        if os.path.exists(p) or emit(dragon, spec[r["workload"]], r["trace"], p) is not None:
            files.append(p)
    out = subprocess.run([bench] + files, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        # "PATH  CPU s cpu  WALL s wall  BYTES bytes"
        if len(f) >= 8 and f[0].endswith(".cu") and f[6] == "wall":
            rows.append((int(f[7]), float(f[4])))
    with open(outdir + "/sample.tsv", "w") as f:
        for b, t in rows:
            f.write("%d\t%.4f\n" % (b, t))
    total = sum(t for _, t in rows)
    print("## %d candidates measured since %s: NVRTC %.1f s, median %.3f s, mean %.3f s"
          % (len(rows), since, total, statistics.median(t for _, t in rows), total / len(rows)))
    print()
    print("| source limit | candidates above | their NVRTC time | median time above |")
    print("|---:|---:|---:|---:|")
    for kb in LIMITS_KB:
        above = [t for b, t in rows if b > kb * 1024]
        print("| %d KB | %.1f%% | %.1f%% | %s |" % (
            kb, 100.0 * len(above) / len(rows), 100.0 * sum(above) / total,
            "%.2f s" % statistics.median(above) if above else "-"))
    print()

    # 2. and 3. the labels
    best = {}
    for w, rs in recs.items():
        ok = [(mean_secs(r), r) for r in rs if mean_secs(r) and not r.get("error")]
        if ok:
            best[w] = min(ok, key=lambda x: x[0])
    sizes = {}
    for k, (w, (secs, r)) in enumerate(sorted(best.items())):
        s = emit(dragon, spec[w], r["trace"], "%s/src/b%05d.cu" % (outdir, k))
        if s is not None:
            sizes[w] = s
            os.unlink("%s/src/b%05d.cu" % (outdir, k))
    print("## %d labelled workloads: the best record's source" % len(sizes))
    print()
    print("| source limit | bests above | labels' slowdown if kept under it: median | p90 | max |")
    print("|---:|---:|---:|---:|---:|")
    giants = {}
    for kb in LIMITS_KB:
        above = [w for w, s in sizes.items() if s > kb * 1024]
        slow = []
        for w in above:
            bsecs = best[w][0]
            alts = []
            for r in sorted(recs[w], key=lambda r: mean_secs(r) or 1e9):
                m = mean_secs(r)
                if not m or r.get("error"):
                    continue
                key = json.dumps(r["trace"])
                if key not in giants:
                    giants[key] = emit(dragon, spec[w], r["trace"], "%s/src/g.cu" % outdir)
                if giants[key] is not None and giants[key] <= kb * 1024:
                    alts.append(m)
                    break
            slow.append(alts[0] / bsecs if alts else float("inf"))
        slow.sort()
        fmt = lambda x: "none left" if x == float("inf") else "%.3fx" % x
        print("| %d KB | %d (%.1f%%) | %s | %s | %s |" % (
            kb, len(above), 100.0 * len(above) / max(1, len(sizes)),
            fmt(slow[len(slow) // 2]) if slow else "-",
            fmt(slow[int(len(slow) * 0.9)]) if slow else "-", fmt(slow[-1]) if slow else "-"))
    with open(outdir + "/best_sizes.tsv", "w") as f:
        for w, s in sorted(sizes.items()):
            f.write("%s\t%s\t%d\n" % (w, spec[w], s))


if __name__ == "__main__":
    main()
