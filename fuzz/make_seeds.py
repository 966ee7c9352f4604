"""Writes three small valid GGUF files as seeds for the gguf_reader fuzz target.

    python3 fuzz/make_seeds.py fuzz/corpus/gguf_reader
"""
import struct, sys, os
out = sys.argv[1]
def s(x): b=x.encode(); return struct.pack('<Q',len(b))+b
def kv(k,t,v): return s(k)+struct.pack('<I',t)+v
def pad(b,a): return b + b'\0'*((-len(b))%a)
def build(kvs, tensors, align=32):
    h = b'GGUF'+struct.pack('<IQQ',3,len(tensors),len(kvs))
    for k in kvs: h+=k
    off=0; datas=b''
    infos=b''
    for name,dims,ty,nbytes in tensors:
        infos+=s(name)+struct.pack('<I',len(dims))+b''.join(struct.pack('<Q',d) for d in dims)+struct.pack('<IQ',ty,off)
        datas=pad(datas,align) if datas else datas
        datas+=bytes((i*7)&255 for i in range(nbytes))
        off=len(pad(datas,align))
    h+=infos
    return pad(h,align)+datas
seeds = []
kvs=[kv('general.architecture',8,s('clover_moe')), kv('clover_moe.block_count',4,struct.pack('<I',4)),
     kv('general.alignment',4,struct.pack('<I',32)),
     kv('a.f32',6,struct.pack('<f',1.5)), kv('a.bool',7,b'\1'), kv('a.i64',11,struct.pack('<q',-5)),
     kv('a.strs',9,struct.pack('<IQ',8,2)+s('ab')+s('c')),
     kv('a.nested',9,struct.pack('<IQ',9,2)+struct.pack('<IQ',5,1)+struct.pack('<i',-1)+struct.pack('<IQ',0,0)),
     kv('a.u8',0,b'\7'), kv('a.f64',12,struct.pack('<d',2.0)), kv('a.i16',3,struct.pack('<h',-3))]
tens=[('tok',[4,2],0,32),('q',[32,1],2,18),('k',[256],12,144),('h',[8,1,1,2],1,32)]
seeds.append(build(kvs,tens))
seeds.append(build(kvs[:2],[]))
seeds.append(build([kv('general.alignment',4,struct.pack('<I',64))],tens[:2],64))
for i,b in enumerate(seeds):
    open(os.path.join(out,f'seed{i}'),'wb').write(b)
print([len(b) for b in seeds])
