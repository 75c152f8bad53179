# tune_report.py: the table and the convergence plot of a scripts/gpu_tune.sh
# run, from its logs and tuning databases (unpacked into one directory).
#
#   python3 bench/tune_report.py DIR [--plot OUT.png]
#
# For each workload: trials recorded, the tuner's best (mean of its timed
# runs, as `dragon db best`), the trial at which the running best first came within 95% of the
# final best (latency <= best / 0.95), the tuning wall time (tune_walls.txt),
# the best trace measured again by `dragon run --repeat 50` (median, min,
# max), PyTorch eager and torch.compile (torch.txt), and eager / dragon and
# compile / dragon (above 1: dragon is faster; dragon is the re-measured
# median where the run has one, else the tuner's best). The geometric means are over
# the workloads that have both numbers. The GEMM row compares with cuBLAS.
# The plot (gnuplot, when --plot is given) shows each workload's running
# best over trials, relative to its final best.
import glob, json, math, os, re, statistics, subprocess, sys


def load_db(d):
    specs, recs = {}, {}
    for path in sorted(glob.glob(os.path.join(d, "db*", "workloads.jsonl"))):
        for line in open(path):
            try:
                w = json.loads(line)
            except ValueError:
                continue
            specs[w["workload"]] = w["spec"]
    for path in sorted(glob.glob(os.path.join(d, "db*", "records.jsonl"))):
        for line in open(path):
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a torn last line
            recs.setdefault(specs.get(r["workload"], r["workload"]), []).append(r)
    return recs


NAMES = {}  # expanded spec -> the name the run used (from the tune logs)


def name_of(spec):
    return NAMES.get(spec, "GEMM16" if spec.startswith("gemm:") else spec.split("/")[0])


def curve(records):
    best, out = math.inf, []
    for r in records:
        t = statistics.mean(r["run_secs"]) if r.get("run_secs") else math.inf
        best = min(best, t)
        out.append(best)
    return out


def rerun(d, w):
    try:
        text = open(os.path.join(d, "rerun_%s.log" % w)).read()
    except OSError:
        return None
    m = re.search(r"^time\s+median ([0-9.]+) us\s+min ([0-9.]+) us\s+max ([0-9.]+) us", text, re.M)
    ok = re.search(r"^check\s+pass", text, re.M) or w == "GEMM16"
    return (float(m.group(1)), float(m.group(2)), float(m.group(3)), bool(ok)) if m else None


def main():
    d = sys.argv[1]
    plot = sys.argv[sys.argv.index("--plot") + 1] if "--plot" in sys.argv else None
    recs = load_db(d)
    if os.path.exists(os.path.join(d, "names.txt")):  # "NAME canonical-spec" lines
        for line in open(os.path.join(d, "names.txt")):
            f = line.split()
            if len(f) == 2:
                NAMES[f[1]] = f[0]
    torch = {}
    for line in open(os.path.join(d, "torch.txt")) if os.path.exists(os.path.join(d, "torch.txt")) else []:
        f = line.split()
        if len(f) == 3:
            torch[f[0]] = tuple(None if x == "-" else float(x) for x in f[1:])
    cublas = None
    if os.path.exists(os.path.join(d, "cublas.txt")):
        m = re.search(r"cublas_us ([0-9.]+)", open(os.path.join(d, "cublas.txt")).read())
        cublas = float(m.group(1)) if m else None
    walls = {}
    if os.path.exists(os.path.join(d, "tune_walls.txt")):
        for line in open(os.path.join(d, "tune_walls.txt")):
            f = line.split()
            walls[f[0]] = int(f[f.index("wall") + 1])
    print("| workload | trials | tuning wall s | tuner best us | trials to 95% | rerun median us (min..max) "
          "| eager us | compile us | eager/dragon | compile/dragon |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    ge, gc, curves = [], [], {}
    for spec in sorted(recs, key=name_of):
        w = name_of(spec)
        rs = recs[spec]
        c = curve(rs)
        curves[w] = c
        best = c[-1] if c else math.inf
        t95 = next((i + 1 for i, v in enumerate(c) if v <= best / 0.95), None)
        rr = rerun(d, w)
        # the re-measured median where there is one, else the tuner's own best
        us = rr[0] if rr and rr[3] else (best * 1e6 if best < math.inf else None)
        eager, comp = torch.get(w, (None, None))
        if w == "GEMM16":
            eager, comp = cublas, None
        re_ = "%.2f (%.2f..%.2f)%s" % (rr[0], rr[1], rr[2], "" if rr[3] else " CHECK FAILED") if rr else "-"
        r1 = eager / us if eager and us else None
        r2 = comp / us if comp and us else None
        if w != "GEMM16":
            if r1: ge.append(r1)
            if r2: gc.append(r2)
        fmt = lambda x, p="%.2f": p % x if x is not None else "-"
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            w, len(rs), walls.get(w, "-"), fmt(best * 1e6 if best < math.inf else None), t95 or "-", re_,
            fmt(eager) + (" (cuBLAS)" if w == "GEMM16" and eager else ""), fmt(comp), fmt(r1), fmt(r2)))
    gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
    print("\ngeomean over %d workloads: eager/dragon %.2f; over %d: compile/dragon %.2f" %
          (len(ge), gm(ge), len(gc), gm(gc)))
    if plot and curves:
        data = plot + ".dat"
        with open(data, "w") as f:
            for w, c in sorted(curves.items()):
                f.write('"%s"\n' % w)
                for i, v in enumerate(c):
                    if v < math.inf:
                        f.write("%d %.6f\n" % (i + 1, v / c[-1]))
                f.write("\n\n")
        n = len(curves)
        script = ('set terminal pngcairo size 900,560; set output "%s"; set logscale y; '
                  'set xlabel "trials"; set ylabel "running best / final best"; set key outside right; '
                  'set title "dragon tune --target cuda (H200): convergence"; '
                  'plot for [i=0:%d] "%s" index i using 1:2 with lines title columnheader(1)' % (plot, n - 1, data))
        subprocess.run(["gnuplot", "-e", script], check=False)
        os.remove(data)


if __name__ == "__main__":
    main()
