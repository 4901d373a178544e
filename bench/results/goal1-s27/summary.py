#!/usr/bin/env python3
"""Medians of alternated fan-out runs: python3 summary.py DIR (JSONs named VARIANT-N.json).

Per run the median round by total time (as bench/run reports it); per variant the median
and range of those runs, the CPU per return, lost returns and job-cache writes."""
import json,glob,sys,statistics as st,collections,os
d=sys.argv[1]; rows=collections.defaultdict(list)
for f in sorted(glob.glob(d+'/*.json')):
    j=json.load(open(f)); name=os.path.basename(f).split('-')[0]
    def find(o):
        if isinstance(o,dict):
            if 'rounds' in o and 'master_cpu_ms_per_return' in o: return o
            for v in o.values():
                r=find(v)
                if r: return r
        if isinstance(o,list):
            for v in o:
                r=find(v)
                if r: return r
    r=find(j)
    ok=[x for x in r['rounds'] if x.get('total_ms') is not None]
    med=sorted(ok,key=lambda x:x['total_ms'])[len(ok)//2]
    rows[name].append((med['p99_ms'],med['p50_ms'],med['recv_p99_ms'],r['master_cpu_ms_per_return'],r['swarm_cpu_ms_per_return'],r['lost'],r.get('cache_written'),r.get('cache_expected')))
for n,v in rows.items():
    p99=[x[0] for x in v]
    print(n,len(v),'p99 med %.1f (%.1f-%.1f)'%(st.median(p99),min(p99),max(p99)),'p50 %.1f'%st.median([x[1] for x in v]),'recv99 %.1f'%st.median([x[2] for x in v]),
      'mcpu %.3f'%st.median([x[3] for x in v]),'scpu %.3f'%st.median([x[4] for x in v]),'lost',sum(x[5] for x in v),'written',sum(x[6] or 0 for x in v),'/',sum(x[7] or 0 for x in v))
    print('   p99s',p99)
