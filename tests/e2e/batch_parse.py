"""Parse what `salt -b` prints (Salt 3008.5's salt/cli/batch.py and sylvite's
master/cli/batch.cpp) into comparable parts, for tests/e2e/test_batch.py and
tests/interop/test_batch_interop.py:

  windows   the minion lists of the "Executing run on [...]" lines, in order
  messages  Salt's other batch lines ("Minion x did not respond. No job will be sent.",
            "NOTICE: ...", "No minions matched the target.", ...), in order
  returns   one normalised text block per minion return (jids -> <JID>), in order
  ids       the minion id of each return block, in order

A return prints as Salt's CLIOutput.on_minion_return: {"retcode", "jid", <id>: ret}
through the outputter: 3 top-level entries per block for nested/yaml/txt, one object for
json, one line for raw; txt: "retcode", "jid" and one line per line of the
return.
"""
from __future__ import annotations

import ast
import json
import re

JID = re.compile(r"\b\d{20}\b")
MESSAGES = (
    re.compile(r"^Minion \S+ did not respond\. No job will be sent\.$"),
    re.compile(r"^Minion '\S+' failed to respond to job sent$"),
    re.compile(r"^NOTICE: Too many minions targeted, switching to batch execution\.$"),
    re.compile(r"^No minions matched the target\..*$"),
)
# Salt 3008.5 prints this when two windows' iterators (one shared jid, one event bus
# consumer) race for a return: a Salt artefact that sylvite does not reproduce.
SALT_TRACKER_NOISE = re.compile(r"^minion \S+ was already deleted from tracker, probably a duplicate key$")
META_KEYS = {"jid", "retcode"}


def normalise(text: str) -> str:
    return JID.sub("<JID>", text)


def parse(stdout: str, out: str = "nested") -> dict:
    windows, messages, body, noise = [], [], [], []
    for line in stdout.splitlines():
        if line.startswith("Executing run on "):
            windows.append(ast.literal_eval(line[len("Executing run on "):]))
        elif any(p.match(line) for p in MESSAGES):
            messages.append(line)
        elif SALT_TRACKER_NOISE.match(line):
            noise.append(line)
        elif line.strip():
            body.append(line)
    returns, ids = [], []
    if out == "json":
        text, dec, pos = "\n".join(body), json.JSONDecoder(), 0
        while pos < len(text):
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            obj, pos = dec.raw_decode(text, pos)
            returns.append(normalise(json.dumps(obj)))
            ids.append(next(k for k in obj if k not in META_KEYS))
    elif out == "txt":
        # "retcode: N", "jid: J", then "<id>: <line>" per line of the return
        blocks = []
        for line in body:
            if line.startswith("retcode: ") or not blocks:
                blocks.append([line])
            else:
                blocks[-1].append(line)
        for blk in blocks:
            returns.append(normalise("\n".join(blk)))
            ids.append(next((ln.split(":", 1)[0] for ln in blk if ln.split(":", 1)[0] not in META_KEYS), ""))
    else:
        entries = []  # top-level entries: a line at column 0 and its indented lines
        for line in body:
            if line[:1].isspace() and entries:
                entries[-1].append(line)
            else:
                entries.append([line])
        per = 1 if out == "raw" else 3
        for i in range(0, len(entries), per):
            group = entries[i:i + per]
            returns.append(normalise("\n".join("\n".join(e) for e in group)))
            if out == "raw":
                d = ast.literal_eval(group[0][0])
                ids.append(next(k for k in d if k not in META_KEYS))
            else:
                keys = [re.split(r":", e[0], maxsplit=1)[0] for e in group]
                ids.append(next(k for k in keys if k not in META_KEYS))
    return {"windows": windows, "messages": messages, "returns": returns, "ids": ids, "noise": noise}
