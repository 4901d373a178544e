"""Table and goal checks for bench/run results."""
from __future__ import annotations

# (scenario, key, label, better): better "low"/"high" gets a ratio column (how many times
# sylvite is better than Salt); None = shown without a ratio.
ROWS = [
    ("onboarding", "seconds", "onboarding: pending -> accepted -> connected (s)", "low"),
    ("memory", "kb_per_minion", "memory: RSS per minion (KB)", "low"),
    ("memory", "pss_kb_per_minion", "memory: PSS per minion (KB)", "low"),
    ("fanout", "total_ms", "fan-out test.ping: publish -> last return (ms)", "low"),
    ("fanout", "p50_ms", "fan-out: p50 return latency (ms)", "low"),
    ("fanout", "p99_ms", "fan-out: p99 return latency (ms)", "low"),
    ("fanout", "lost", "fan-out: returns lost (all rounds)", None),
    ("ingest", "returns_per_s", "ingest: returns/s acked", "high"),
    ("ingest", "ack_p99_ms", "ingest: p99 ack latency (ms)", "low"),
    ("ingest", "cache_written", "ingest: returns in the job cache", None),
    ("auth_storm", "auths_per_s", "auth storm: sign-ins/s (wall, swarm on the same cores)", "high"),
    ("auth_storm", "all_answer_ping_s", "auth storm: master up -> all answer a ping (s)", "low"),
    ("auth_storm", "auth_timeouts", "auth storm: sign-in timeouts (5 s)", None),
    ("auth_storm", "master_cpu_ms_per_auth", "auth storm: master CPU per sign-in (ms)", "low"),
    ("auth_storm", "auths_per_core_s", "auth storm: sign-ins per master core-second", "high"),
    ("auth_storm", "private_ops_per_auth", "auth storm: master RSA private ops per sign-in (code)", None),
    ("auth_storm", "measured_private_ops_per_auth", "auth storm: ... measured (uprobes)", None),
    ("longrun", "cpu_pct_mean", "long run: master CPU (% of one core, mean)", "low"),
    ("longrun", "rss_growth_kb", "long run: RSS growth over the run (KB)", None),
    ("longrun", "rss_flat", "long run: RSS flat", None),
    ("longrun", "lost", "long run: returns lost", None),
]


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _ratio(a, b, better):
    if better is None or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return "-"
    if better == "low":
        return f"{b / a:,.1f}x" if a > 0 else "-"
    return f"{a / b:,.1f}x" if b > 0 else "-"


def table_rows(doc) -> list[list[str]]:
    res = doc["results"]
    rows = []
    for sc, key, label, better in ROWS:
        if sc not in res:
            continue
        for size in sorted(res[sc], key=int):
            per = res[sc][size]
            syl = per.get("sylvite", {})
            salt = per.get("salt", {})
            if key not in syl and key not in salt and "error" not in syl and "error" not in salt:
                continue
            a = syl.get(key) if "error" not in syl else "error"
            b = salt.get(key) if "error" not in salt else "error"
            rows.append([label, size, _fmt(a), _fmt(b), _ratio(a, b, better)])
    return rows


def transport_of(doc) -> str:
    """The run's transport (results written before --transport existed were all tcp)."""
    return doc.get("transport") or doc.get("config", {}).get("transport") or "tcp"


def markdown_table(doc) -> str:
    out = [f"| metric (transport: {transport_of(doc)}) | N | sylvite | Salt 3008.5 | sylvite better by |",
           "|---|---:|---:|---:|---:|"]
    for r in table_rows(doc):
        out.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(out)


def print_table(doc):
    rows = [[f"metric (transport: {transport_of(doc)})", "N", "sylvite", "Salt 3008.5", "ratio"]] + table_rows(doc)
    w = [max(len(str(r[i])) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print("  ".join(str(c).ljust(w[j]) if j == 0 else str(c).rjust(w[j]) for j, c in enumerate(r)))
        if i == 0:
            print("  ".join("-" * x for x in w))
    for g in doc.get("goals", []):
        print(f"goal {g['goal']}: {g['status']} ({g['detail']})")
    for sc, per_size in doc["results"].items():
        for size, per in per_size.items():
            for kind, r in per.items():
                if isinstance(r, dict):
                    for n in r.get("notes", []) + ([r["note"]] if "note" in r else []) + (
                            [r["error"]] if "error" in r else []):
                        print(f"note {sc} {size} {kind}: {n}")


def goals(res) -> list[dict]:
    out = []

    def get(sc, size, kind, key):
        return res.get(sc, {}).get(str(size), {}).get(kind, {}).get(key)

    if "1000" in res.get("fanout", {}):
        a, b = get("fanout", 1000, "sylvite", "total_ms"), get("fanout", 1000, "salt", "total_ms")
        p99, lost = get("fanout", 1000, "sylvite", "p99_ms"), get("fanout", 1000, "sylvite", "lost")
        ratio = (b / a) if (a and b) else None
        ok = ratio is not None and ratio >= 20 and p99 is not None and p99 < 50 and lost == 0
        out.append({"goal": "fan-out 1k: >= 20x faster than Salt, p99 < 50 ms, 0 lost",
                    "status": "met" if ok else "missed",
                    "detail": f"ratio {ratio and round(ratio, 1)}, p99 {p99} ms, lost {lost}"})
    if "5000" in res.get("fanout", {}):
        p99, lost = get("fanout", 5000, "sylvite", "p99_ms"), get("fanout", 5000, "sylvite", "lost")
        ok = p99 is not None and p99 < 500 and lost == 0
        out.append({"goal": "fan-out 5k: p99 < 500 ms, 0 lost", "status": "met" if ok else "missed",
                    "detail": f"p99 {p99} ms, lost {lost}"})
    for size in sorted(res.get("auth_storm", {}), key=int):
        per_core = get("auth_storm", size, "sylvite", "auths_per_core_s")
        ceil = get("auth_storm", size, "sylvite", "rsa_ceiling_auths_per_core_s")
        ops_s = get("auth_storm", size, "sylvite", "master_private_ops_per_s")
        if per_core and ceil:
            frac = per_core / ceil
            rsa = get("auth_storm", size, "sylvite", "rsa_private_ops_per_core_s") or 4000
            out.append({"goal": f"auth storm {size}: >= 70% of the RSA ceiling ({rsa:,.0f} private ops/core/s "
                                f"measured in this run)",
                        "status": "met" if frac >= 0.7 else "missed",
                        "detail": f"{per_core:.0f} sign-ins per master core-second = {100 * frac:.0f}% of the "
                                  f"RSA-only ceiling {ceil:.0f}; wall: {ops_s} private ops/s on the master"})
    for size in sorted(res.get("memory", {}), key=int):
        kb = get("memory", size, "sylvite", "kb_per_minion")
        if kb is not None:
            out.append({"goal": f"memory {size}: < 16 KB RSS per connected minion",
                        "status": "met" if kb < 16 else "missed", "detail": f"{kb} KB"})
    return out
