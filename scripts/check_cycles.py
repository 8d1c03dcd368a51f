#!/usr/bin/env python3
"""No import cycle inside a crate (ARCHITECTURE.md invariant; run by scripts/test.sh).

For every crate of the workspace (members of the root Cargo.toml; crate roots src/lib.rs and
src/main.rs), build the module tree from the source files (`mod x;` with `x.rs`, `x/mod.rs` and
`#[path]` layouts, inline `mod x { ... }` blocks; `#[cfg(test)]` items are ignored), collect every
reference to another module of the crate (`crate::a::b` and `super::...` paths, in `use` trees,
grouped ones included, and in code; comments and string literals are skipped), resolve it to the
longest declared module prefix, and lift each reference from module S to module D to the two
distinct children of their lowest common ancestor (a reference between a module and one of its
ancestors or descendants is not an edge). A cycle among the children of one module fails the check:

    tern-gpu: ops -> float_ops -> ops
        ops -> float_ops    runtime/gpu/src/ops.rs:12
        float_ops -> ops    runtime/gpu/src/float_ops.rs:9

Usage: check_cycles.py [--crate NAME] [--self-test] [--root DIR]. Exit 1 on a cycle.
Python 3 standard library only.
"""

import argparse
import glob
import os
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
KEYWORDS_NOT_MODULES = {"self", "super", "crate", "Self"}


# ------------------------------------------------------------------------------------------------
# Lexing: blank out comments, strings and char literals (keeping newlines, so offsets and line
# numbers still match the file), then blank out `#[cfg(test)]` items.


def strip_comments_and_strings(src):
    out = list(src)
    i, n = 0, len(src)

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == "/" and src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and re.match(r"(?:br|r)#*\"", src[i : i + 260]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r"(?:br|r)(#*)\"", src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            blank(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # char literal ('x', '\n', '\u{..}', b'x') or a lifetime ('a)
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 3)
                j = n if j < 0 else j
                blank(i, j + 1)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                blank(i, i + 3)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def match_brace(text, open_at):
    """Index just past the `}` matching the `{` at `open_at` (text already stripped)."""
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(text)


ATTR_RE = re.compile(r"#\s*!?\s*\[")


def attr_end(text, at):
    """Index just past the `]` closing the attribute whose `[` is at `at`."""
    depth = 0
    for k in range(at, len(text)):
        if text[k] == "[":
            depth += 1
        elif text[k] == "]":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(text)


CFG_TEST_RE = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")


def strip_cfg_test(text):
    """Blank every item carrying `#[cfg(test)]` (up to its `;` or its `{ ... }` block)."""
    out = list(text)
    pos = 0
    while True:
        m = CFG_TEST_RE.search(text, pos)
        if not m:
            break
        j = m.end()
        # skip further attributes
        while True:
            s = re.compile(r"\s*").match(text, j).end()
            if text.startswith("#", s):
                b = text.find("[", s)
                j = attr_end(text, b)
            else:
                j = s
                break
        k = j
        while k < len(text) and text[k] not in ";{":
            k += 1
        end = k + 1 if k < len(text) and text[k] == ";" else match_brace(text, k)
        for x in range(m.start(), min(end, len(text))):
            if out[x] != "\n":
                out[x] = " "
        pos = end
    return "".join(out)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


# ------------------------------------------------------------------------------------------------
# Module tree


MOD_DECL_RE = re.compile(
    r"(?P<attrs>(?:#\s*\[[^\]]*\]\s*)*)"
    r"(?:\bpub(?:\s*\([^)]*\))?\s+)?\bmod\s+(?P<name>" + IDENT + r")\s*(?P<kind>[;{])"
)
PATH_ATTR_RE = re.compile(r"#\s*\[\s*path\s*=\s*\"([^\"]+)\"\s*\]")


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names from the crate root
        self.file = file


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.root_file = root_file
        self.modules = {}  # path tuple -> Module
        self.files = []  # (file, stripped text, list of (start, end, module path) regions)
        self.errors = []
        self._load(root_file, (), os.path.dirname(root_file))

    def _load(self, file, mpath, child_dir):
        try:
            with open(file, encoding="utf-8") as f:
                raw = f.read()
        except OSError as e:
            self.errors.append(f"{file}: {e}")
            return
        text = strip_comments_and_strings(raw)
        # keep `#[path = "..."]` attributes (their strings were blanked): read them from raw
        path_attrs = {m.start(): m.group(1) for m in PATH_ATTR_RE.finditer(raw)}
        text = strip_cfg_test(text)
        self.modules[mpath] = Module(mpath, file)
        # regions: (start, end, module path, child dir); the whole file first
        regions = [(0, len(text), mpath, child_dir)]
        for m in MOD_DECL_RE.finditer(text):
            start = m.start()
            # the module this declaration sits in: innermost region containing it
            outer = max((r for r in regions if r[0] <= start < r[1]), key=lambda r: r[0])
            name = m.group("name")
            sub = outer[2] + (name,)
            if m.group("kind") == "{":
                brace = m.end() - 1
                end = match_brace(text, brace)
                regions.append((brace, end, sub, os.path.join(outer[3], name)))
                self.modules[sub] = Module(sub, file)
                continue
            explicit = None
            attrs = m.group("attrs")
            for off, p in path_attrs.items():
                if m.start() <= off < m.start() + len(attrs):
                    explicit = p
            if explicit is not None:
                cand = [os.path.join(os.path.dirname(file), explicit)]
            else:
                cand = [
                    os.path.join(outer[3], name + ".rs"),
                    os.path.join(outer[3], name, "mod.rs"),
                ]
            target = next((c for c in cand if os.path.isfile(c)), None)
            if target is None:
                self.errors.append(f"{file}:{line_of(text, start)}: no file for `mod {name};`")
                continue
            if os.path.basename(target) == "mod.rs" or explicit is not None and target.endswith("mod.rs"):
                sub_dir = os.path.dirname(target)
            else:
                sub_dir = os.path.join(os.path.dirname(target), os.path.splitext(os.path.basename(target))[0])
            self._load(target, sub, sub_dir)
        self.files.append((file, text, regions))

    def module_at(self, regions, offset):
        r = max((r for r in regions if r[0] <= offset < r[1]), key=lambda r: r[0])
        return r[2]

    def resolve(self, segments):
        """Longest declared module prefix of an absolute path (tuple of names)."""
        best = ()
        for k in range(1, len(segments) + 1):
            if tuple(segments[:k]) in self.modules:
                best = tuple(segments[:k])
            else:
                break
        return best


# ------------------------------------------------------------------------------------------------
# References


USE_RE = re.compile(r"\buse\s+([^;]*);")
PATH_RE = re.compile(r"(?<![A-Za-z0-9_$:])((?:crate|super)(?:\s*::\s*(?:" + IDENT + r"))+)")


def expand_use_tree(tree):
    """All paths of a use tree, e.g. `crate::{a, b::{c, d}}` -> [[crate, a], [crate, b, c], ...]."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(prefix, s):
        brace = s.find("{")
        if brace < 0:
            segs = [x for x in s.split("::") if x and x != "*"]
            out.append(prefix + segs)
            return
        head = [x for x in s[:brace].split("::") if x]
        inner = s[brace + 1 : s.rfind("}")]
        for part in split_top(inner):
            if part == "self":
                out.append(prefix + head)
            else:
                walk(prefix + head, part)

    walk([], tree)
    return out


def absolute(mpath, segs):
    """Absolute module path of `segs` (a path starting with crate/super/self) seen from `mpath`."""
    if not segs:
        return None
    if segs[0] == "crate":
        return list(segs[1:])
    if segs[0] in ("super", "self"):
        base = list(mpath)
        k = 0
        while k < len(segs) and segs[k] in ("super", "self"):
            if segs[k] == "super":
                if not base:
                    return None
                base.pop()
            k += 1
        return base + list(segs[k:])
    return None


def references(crate):
    """Yield (source module, target module, file, line) for every crate/super reference."""
    for file, text, regions in crate.files:
        code = list(text)  # the text outside `use` items, for the paths in code
        for m in USE_RE.finditer(text):
            for k in range(m.start(), m.end()):
                if code[k] != "\n":
                    code[k] = " "
            # drop `as` renames before expanding (`a::b as c`)
            body = re.sub(r"\s+as\s+" + IDENT, "", m.group(1))
            for segs in expand_use_tree(body):
                if not segs or segs[0] not in ("crate", "super", "self"):
                    continue
                src = crate.module_at(regions, m.start())
                absp = absolute(src, segs)
                if absp is None:
                    continue
                yield src, crate.resolve(absp), file, line_of(text, m.start())
        for m in PATH_RE.finditer("".join(code)):
            segs = [s.strip() for s in m.group(1).split("::")]
            src = crate.module_at(regions, m.start())
            absp = absolute(src, segs)
            if absp is None:
                continue
            yield src, crate.resolve(absp), file, line_of(text, m.start())


def sibling_edges(crate):
    """{parent path: {(a, b): (file, line)}}: references lifted to children of the common ancestor."""
    groups = {}
    for src, dst, file, line in references(crate):
        k = 0
        while k < len(src) and k < len(dst) and src[k] == dst[k]:
            k += 1
        if k == len(src) or k == len(dst):
            continue  # one is an ancestor of the other (or the same module)
        parent = src[:k]
        edge = (src[k], dst[k])
        groups.setdefault(parent, {}).setdefault(edge, (file, line))
    return groups


def find_cycles(edges):
    """Strongly connected components of more than one node, each with one cycle through them."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:
        members = set(comp)
        start = comp[0]
        # shortest path start -> ... -> start inside the component (BFS)
        prev, frontier, found = {start: None}, [start], None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        path = [start]
        v = found
        while v is not None and v != start:
            path.append(v)
            v = prev[v]
        path = [start] + list(reversed(path[1:])) + [start]
        cycles.append((comp, path))
    return cycles


def check_crate(crate, root_dir, out):
    for e in crate.errors:
        print(f"{crate.name}: warning: {e}", file=out)
    bad = 0
    for parent, edges in sorted(sibling_edges(crate).items()):
        for comp, path in find_cycles(edges):
            bad += 1
            pre = "::".join(parent)
            name = lambda m: f"{pre}::{m}" if pre else m
            print(f"{crate.name}: " + " -> ".join(name(m) for m in path), file=out)
            for a, b in zip(path, path[1:]):
                file, line = edges[(a, b)]
                print(f"    {name(a)} -> {name(b)}    {os.path.relpath(file, root_dir)}:{line}", file=out)
            if len(comp) > len(path) - 1:
                print(f"    (strongly connected: {', '.join(name(m) for m in comp)})", file=out)
    return bad


# ------------------------------------------------------------------------------------------------
# Workspace


def workspace_crates(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        toml = f.read()
    m = re.search(r"^\s*members\s*=\s*\[(.*?)\]", toml, re.S | re.M)
    members = re.findall(r"\"([^\"]+)\"", m.group(1)) if m else []
    dirs = []
    for member in members:  # `crates/*` globs too
        dirs += sorted(glob.glob(os.path.join(root, member))) if "*" in member else [os.path.join(root, member)]
    crates = []
    for d in dirs:
        try:
            with open(os.path.join(d, "Cargo.toml"), encoding="utf-8") as f:
                ct = f.read()
        except OSError:
            continue
        pkg = re.search(r"^\[package\][^\[]*?^name\s*=\s*\"([^\"]+)\"", ct, re.S | re.M)
        name = pkg.group(1) if pkg else os.path.basename(d)
        for rootfile, suffix in (("src/lib.rs", ""), ("src/main.rs", " (bin)")):
            p = os.path.join(d, rootfile)
            if os.path.isfile(p):
                crates.append((name, name + suffix, p))
    return crates


def run(root, only=None, out=sys.stdout):
    crates = workspace_crates(root)
    if only is not None:
        crates = [c for c in crates if c[0] == only]
        if not crates:
            print(f"no crate named {only} in {root}/Cargo.toml", file=sys.stderr)
            return 2
    bad = 0
    for _, label, rootfile in crates:
        bad += check_crate(Crate(label, rootfile), root, out)
    checked = ", ".join(label for _, label, _ in crates)
    if bad:
        print(f"{bad} import cycle(s) (checked {checked})", file=out)
        return 1
    print(f"no import cycle in {checked}", file=out)
    return 0


def self_test():
    import io

    def make(tmp, files):
        for rel, body in files.items():
            p = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(body)

    ws = '[workspace]\nmembers = ["a"]\n'
    pkg = '[package]\nname = "a"\n'
    cases = {
        "cycle": (
            {
                "src/lib.rs": "pub mod x;\npub mod y;\n",
                "src/x.rs": "use crate::y::Y;\npub struct X;\n",
                "src/y.rs": "pub struct Y;\npub fn f() -> crate::x::X { crate::x::X }\n",
            },
            1,
        ),
        "nested cycle via super and grouped use": (
            {
                "src/lib.rs": "mod p;\n",
                "src/p.rs": "mod q;\nmod r;\n",
                "src/p/q.rs": "use super::{r::R, *};\npub struct Q;\n",
                "src/p/r/mod.rs": "mod s;\npub struct R;\n",
                "src/p/r/s.rs": "fn g() { let _ = super::super::q::Q; }\n",
            },
            1,
        ),
        "no cycle": (
            {
                "src/lib.rs": "pub mod x;\npub mod y;\npub use x::X;\n",
                "src/x.rs": "pub struct X;\n/// crate::y::Y in a comment\nconst S: &str = \"crate::y\";\n"
                "#[cfg(test)]\nmod tests {\n    use crate::y::Y;\n}\n",
                "src/y.rs": "use crate::x::X;\nuse crate::X as Z;\nmod inner { use super::super::x::X; }\n",
            },
            0,
        ),
    }
    ok = True
    for label, (files, want) in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            make(tmp, {"Cargo.toml": ws, "a/Cargo.toml": pkg, **{"a/" + k: v for k, v in files.items()}})
            buf = io.StringIO()
            got = run(tmp, out=buf)
            if got != want:
                ok = False
                print(f"self-test {label!r}: exit {got}, expected {want}\n{buf.getvalue()}")
    print("self-test " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crate", help="check only this crate (package name)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on temporary crates")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return run(os.path.abspath(args.root), args.crate)


if __name__ == "__main__":
    sys.exit(main())
