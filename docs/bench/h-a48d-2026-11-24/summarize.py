#!/usr/bin/env python3
"""Tables of h-a48d's two device calls (call-1/, call-2/r/): tern a4.8 vs A8 (same weights,
`--activations` override), per-kernel decode profiles, llama.cpp TQ2_0. Run from this folder."""
import glob, json, os, re

def tests(f):
    d = json.load(open(f))
    return {t["test"]: t["avg_ts"] for t in d["tests"]}, d

print("## e2e (device-a48.sh, F16 head): tag a4.8 pp/tg, a8 pp/tg, a4.8/a8 tg")
for tag in ["mine2-1", "main-1", "mine-1", "mine2-2", "main-2"]:
    a, _ = tests(f"call-2/r/{tag}/tern-a4.8.json")
    b, _ = tests(f"call-2/r/{tag}/tern-a4.8-file-as-a8.json")
    print(f"| {tag} | {a['pp512']:.0f} / {a['tg128']:.1f} | {b['pp512']:.0f} / {b['tg128']:.1f} | {a['tg128']/b['tg128']:.3f} |")
print("## tq2 (q6_K head), call 2 in order")
rows = sorted(glob.glob("call-2/r/tq2-*.json"), key=lambda f: int(re.findall(r"-(\d+)\.json", f)[0]))
for f in rows:
    t, _ = tests(f)
    print(os.path.basename(f), round(t["pp512"]), round(t["tg128"], 1))
print("## profiles (us per dispatch), call 2")
acc = {}
for f in sorted(glob.glob("call-2/r/prof-*.json")):
    b, a = re.findall(r"prof-(\w+)-(a4\.8|a8)-\d", f)[0]
    d = json.load(open(f))
    p = d["profile_us_per_token"]
    e = acc.setdefault((b, a), {"total": []})
    e["total"].append(sum(k["us"] for k in p))
    for k in p:
        e.setdefault(k["kernel"], []).append(k["us"] / k["dispatches"])
for (b, a), e in sorted(acc.items()):
    print(b, a, {k: round(sum(v) / len(v), 2) for k, v in e.items()})
for f in ["call-2/r/llama/llama-tq2_0.json"]:
    for e in json.load(open(f)):
        print("llama", "pp" if e["n_prompt"] else "tg", round(e["avg_ts"], 1), round(e["stddev_ts"], 1))
