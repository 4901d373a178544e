#!/usr/bin/env python3
"""Evidence for fileserver_options::final_chunk_hsum defaulting to off: drives Salt's own
RemoteClient.get_file (salt/fileclient.py) with a fake channel serving a file in chunks.
With "hsum" in the final empty _serve_file chunk a first download raises FileNotFoundError
(the minion hashes the cache path while the data is still in atomic_open's temp file).
usage: serve_file_hsum_check.py 0|1   (0: no hsum -> ok; 1: hsum -> EXC FileNotFoundError)"""
import hashlib, sys, tempfile
import salt.config, salt.fileclient
d = tempfile.mkdtemp()
opts = salt.config.minion_config(None)
opts.update({"cachedir": d, "file_client": "remote", "hash_type": "sha256", "master_type": "str"})
data = b"hello world\n"
with_hsum = sys.argv[1] == "1"
class C(salt.fileclient.RemoteClient):
    def __init__(self, opts):
        self.opts = opts; self.utils = None; self.serverhashes = {}
    def hash_file(self, path, saltenv="base"):
        return {"hsum": hashlib.sha256(data).hexdigest(), "hash_type": "sha256"} if path.startswith("salt://") else {}
    def _channel_send(self, load, raw=False):
        loc = load["loc"]
        chunk = data[loc:loc + 4]
        r = {"data": chunk, "dest": "x.txt"}
        if not chunk and with_hsum:
            r["hsum"] = hashlib.sha256(data).hexdigest(); r["hash_type"] = "sha256"
        return r
c = C(opts)
try:
    dest = c.get_file("salt://x.txt", "", saltenv="base")
    print("ok", dest, open(dest, "rb").read() == data)
except Exception as e:
    print("EXC", type(e).__name__, e)
