#!/usr/bin/env python3
"""The samples of `perf script -F comm,tid,ip,sym` output (with call graphs) by category: a
sample counts for the first category in CATS that names one of its frames, so the RSA
operations are counted wherever they are called from. Prints a Markdown table, one column
per argument, NAME=FILE[,FILE...] (the samples of the files pooled).
Usage: categorize.py tcp=a.script,b.script zeromq=c.script"""
import collections
import re
import sys

CATS = [
    ("RSA private: token decrypt", ["crypto::oaep_decrypt"]),
    ("RSA private: reply signature", ["crypto::sign["]),
    ("RSA public: 3 encryptions to the minion's key", ["crypto::oaep_encrypt"]),
    ("RSA public: the minion's token, once per key and master start", ["accepted_keys::check_token", "x931_recover"]),
    ("RSA public: other verifications", ["crypto::verify"]),
    ("minion key files: state, read, first parse", ["key_store::", "accepted_keys::", "auth_table::"]),
    ("AES payloads (crypticle)", ["crypticle::"]),
    ("job cache and returns (the readiness ping)", ["job_cache::", "job_service::"]),
    ("request logic: router, auth table, replies, events", ["request_router::", "master::authenticate", "master_core::",
                                                             "event_hub", "presence"]),
    ("transport: accept, read, write, close, frames", ["transport::", "zmtp", "zmq"]),
    ("io loops: epoll, wake-ups, worker queue", ["epoll_reactor", "scheduler::", "worker_pool::", "pthread_cond", "futex"]),
]
OTHER = "other: timers, kernel work outside a request"


def load(path):
    samples, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if cur is not None:
                    samples.append(cur)
                cur = None
            elif not line.startswith((" ", "\t")):
                cur = []
            elif cur is not None:
                parts = line.strip().split(None, 1)
                cur.append(re.sub(r"\+0x[0-9a-f]+$", "", parts[-1]))
    if cur is not None:
        samples.append(cur)
    return samples


def categorize(samples):
    c = collections.Counter()
    for frames in samples:
        for name, subs in CATS:
            if any(x in fr for fr in frames for x in subs):
                c[name] += 1
                break
        else:
            c[OTHER] += 1
    return c


def main(args):
    runs = []
    for a in args:
        name, _, files = a.partition("=")
        runs.append((name, [s for f in files.split(",") for s in load(f)]))
    counts = [categorize(s) for _, s in runs]
    print("| share of the restarted master's CPU samples | " + " | ".join(n for n, _ in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for name in [n for n, _ in CATS] + [OTHER]:
        cells = [f"{100 * c[name] / max(1, len(s)):.1f}%" for c, (_, s) in zip(counts, runs)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| samples | " + " | ".join(str(len(s)) for _, s in runs) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
