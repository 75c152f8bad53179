# compile_order.py TIMES: a judged batch's compile rounds scheduled on P threads, in the candidates' order and
# largest source first, from `bench_nvrtc` times of the outputs and baselines of an evaluation's first 128
# tasks (c<task>_<g|b>.cu, one thread each): each batch's makespan against its bound, max(longest, sum / P).
import re,heapq,sys
t={};sz={}
for l in open(sys.argv[1]):
    m=re.match(r'.*/c(\d+)_(\w)\.cu\s+([\d.]+) s cpu\s+([\d.]+) s wall\s+(\d+) bytes',l)
    if m: t[(int(m[1]),m[2])]=float(m[3]); sz[(int(m[1]),m[2])]=int(m[5])
def makespan(jobs,P):
    h=[0.0]*P
    for d in jobs:
        s=heapq.heappop(h); heapq.heappush(h,s+d)
    return max(h)
for P in (15,7):
  tot_a=tot_b=tot_lb=0
  for b in range(0,128,32):
    items=[]
    for i in range(b,b+32):
        for k in ('g','b'):
            if (i,k) in t: items.append((i,k))
    if not items: continue
    a=[t[x] for x in items]
    bb=[t[x] for x in sorted(items,key=lambda x:-sz[x])]
    ma,mb=makespan(a,P),makespan(bb,P)
    lb=max(max(a),sum(a)/P)
    tot_a+=ma; tot_b+=mb; tot_lb+=lb
    print(f'P={P} batch {b//32}: n={len(items)} index order {ma:.2f} s, largest first {mb:.2f} s, bound {lb:.2f} s, longest {max(a):.2f} s, sum {sum(a):.1f}')
  print(f'P={P} total: index {tot_a:.2f}, largest first {tot_b:.2f}, bound {tot_lb:.2f}')
