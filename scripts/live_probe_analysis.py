#!/usr/bin/env python3
"""The robust-baseline analysis of scripts/live_probe.py's raw CSVs (docs/data/live-probe-h100-robust-baseline.txt):
start lateness against the second-lowest of recent offsets, false alarms alone, requests revealed, and the
lateness of our first kernel after each request. Usage: live_probe_analysis.py DIR (the unpacked live-probe.tar.gz)."""
import os, sys, glob, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
D = sys.argv[1] if len(sys.argv) > 1 else '/tmp/live-probe'
from live_probe import read_pacer, pct
def offsets(rows, key=1):
    c=0; out=[0.0]
    for i in range(1,len(rows)):
        c+=rows[i][3]-(rows[i][key]-rows[i-1][key])/1e3
        out.append(c)
    return out
def late_robust(rows, win=32, q=0.25, key=1):
    off=offsets(rows,key)
    late=[0.0]*len(off)
    for i in range(len(off)):
        w=off[max(0,i-win):i] or [off[i]]
        b=sorted(w)[int(q*(len(w)-1))]
        late[i]=off[i]-b
    return late
reqs=[tuple(map(int,l.split(','))) for l in open(os.path.join(D, 'service.csv')).read().split('\n')[1:] if l]
for fn in sorted(glob.glob(os.path.join(D, 'alone-*.csv'))):
    rows,meta=read_pacer(fn)
    L=late_robust(rows)[40:]
    secs=(rows[-1][1]-rows[40][1])/1e9
    print(fn.split('/')[-1], 'p50 %.1f p99 %.1f max %.1f'%(pct(L,50),pct(L,99),max(L)), 'fp/s >30: %.2f >50: %.2f >100: %.2f'%(sum(x>30 for x in L)/secs,sum(x>50 for x in L)/secs,sum(x>100 for x in L)/secs))
for fn in sorted(glob.glob(os.path.join(D, 'with-*.csv'))):
    rows,meta=read_pacer(fn)
    k=int(fn.split('-')[-2])
    L=late_robust(rows)
    t_first,t_last=rows[0][1],rows[-1][1]
    inside=[r for r in reqs if t_first+0.2e9<=r[0]<=t_last-0.05e9]
    det={30:0,50:0,100:0}; lat_near=[]
    for t0,t1 in inside:
        near=[i for i,r in enumerate(rows) if t0-20e3<=r[1]<=t1+20e3]
        mx=max([L[i] for i in near] or [0])
        lat_near.append(mx)
        for T in det: det[T]+= mx>T
    far=[L[i] for i,r in enumerate(rows) if i>40 and not any(t0-3e6<=r[1]<=t1+3e6 for t0,t1 in reqs)]
    secs=(t_last-t_first)/1e9
    print(fn.split('/')[-1], len(inside), 'det', {T:round(v/len(inside),2) for T,v in det.items()}, 'fp/s', {T:round(sum(x>T for x in far)/secs,2) for T in (30,50,100)}, 'late near p50 %.0f p90 %.0f'%(pct(lat_near,50),pct(lat_near,90)))
print('--- lateness vs the previous request, sparse probe and 2000/2000')
import bisect
ends=[r[1] for r in reqs]; starts=[r[0] for r in reqs]
for fn in [os.path.join(D, f) for f in ('with-9-5-10000.csv', 'with-5-2000-2000.csv', 'with-1-500-500.csv')]:
    rows,meta=read_pacer(fn)
    L=late_robust(rows)
    first=[];other=[]
    for i,r in enumerate(rows):
        if i<40: continue
        j=bisect.bisect_right(ends,r[1])-1
        if j<0: continue
        # inside a request?
        if starts[j+1 if j+1<len(starts) else j] <= r[1] : pass
        since=(r[1]-ends[j])/1e6
        if any(s-0.05e6<=r[1]<=e for s,e in reqs[max(0,j-1):j+2]): continue
        # is this the first kernel of ours after request j?
        prev=rows[i-1][1]
        if prev < ends[j]: first.append((since,L[i]))
        else: other.append(L[i])
    print(fn.split('/')[-1],'first after a request: n',len(first),'late p50 %.0f p90 %.0f'%(pct([x[1] for x in first],50),pct([x[1] for x in first],90)), ' others: n',len(other),'p50 %.0f p99 %.0f'%(pct(other,50),pct(other,99)))
