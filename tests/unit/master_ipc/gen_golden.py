#!/usr/bin/env python3
# Independent msgpack writer (no dependency) for the golden bytes of test_ipc_protocol.cpp:
# the maps below, in the key order the CLIs and the master send them. Run it and compare
# with the hex strings in the test.
import struct
def pack(o):
    if o is None: return b'\xc0'
    if o is True: return b'\xc3'
    if o is False: return b'\xc2'
    if isinstance(o,int):
        if 0<=o<128: return bytes([o])
        if 0<=o<256: return b'\xcc'+bytes([o])
        if 0<=o<65536: return b'\xcd'+struct.pack('>H',o)
        raise ValueError
    if isinstance(o,str):
        b=o.encode(); n=len(b)
        if n<32: return bytes([0xa0|n])+b
        if n<256: return b'\xd9'+bytes([n])+b
        raise ValueError
    if isinstance(o,list):
        assert len(o)<16
        return bytes([0x90|len(o)])+b''.join(pack(x) for x in o)
    if isinstance(o,dict):
        assert len(o)<16
        return bytes([0x80|len(o)])+b''.join(pack(k)+pack(v) for k,v in o.items())
J='20240101010101010101'
for m in [
 {'cmd':'ping'},
 {'cmd':'publish','tgt':'*','tgt_type':'glob','fun':'test.ping','arg':[],'ret':'','timeout':5,'user':'root','delimiter':':','wait':True},
 {'id':'m1','jid':J,'return':True,'retcode':0,'success':True},
 {'done':True,'jid':J,'no_return':['m2']},
 {'cmd':'key_event','act':'delete','ids':['m1'],'rotate':False},
]:
    print(pack(m).hex())
