// Top-k of one row of logits for sampling on the GPU: the k largest values, sorted by
// (value descending, index ascending; −0 and +0 compare equal), as (u32 id, f32 value bits)
// pairs; slots past the number of candidates hold (0xffffffff, -inf). NaN logits are never
// candidates. Exact (selection only, values copied).
//
// Two passes (override MERGE): pass 1 (MERGE = 0) — workgroup g takes logits
// [g·per, (g+1)·per) and writes its own sorted top-k to pairs [g][k]; pass 2 (MERGE = 1, one
// workgroup) takes the n_in pairs of pass 1 and writes the final top-k (with one workgroup of
// logits, pass 1 writes the final result directly). Pass 1's lists are in id order between
// workgroups and sorted within, so among equal values a lower position in pass 2's input is a
// lower id: both passes break ties by position.
//
// Selection without sorting: values map to order-preserving u32 keys (0 = absent); a radix
// select over 4 digits of 8 bits (a workgroup histogram per digit, a scan to find the digit
// holding the k-th largest) gives the k-th key T and how many items equal to T to take; the items
// above T and the first (lowest-position) ties are then placed with prefix sums over contiguous
// per-invocation ranges, and the k candidates ranked by comparing all pairs.
// Bindings: params; input (MERGE 0: f32 logits as u32 bits; MERGE 1: pairs); out pairs.

// #import common

override MERGE: u32 = 0u;

struct Params {
    n_in: u32, // logits (pass 1) or candidate pairs (pass 2)
    k: u32,
    per: u32, // logits per workgroup (pass 1)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

const WG: u32 = 256u;
const MAX_K: u32 = 64u;
const NONE: u32 = 0xffffffffu;
const NEG_INF: u32 = 0xff800000u;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> scan: array<vec2<u32>, 256>;
var<workgroup> sel: vec2<u32>;
var<workgroup> cand_key: array<u32, 64>;
var<workgroup> cand_id: array<u32, 64>;
var<workgroup> cand_bits: array<u32, 64>;

// f32 bits → u32 key with the same order (−0 as +0); NaN → 0 (absent).
fn key_of(b: u32) -> u32 {
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0u;
    }
    let c = select(b, 0u, b == 0x80000000u);
    return select(c | 0x80000000u, ~c, (c & 0x80000000u) != 0u);
}

// Item j of this workgroup's input: (id, key, value bits); key 0 = absent.
fn item(base: u32, j: u32) -> vec3<u32> {
    if (MERGE == 0u) {
        let bits = src[base + j];
        return vec3<u32>(base + j, key_of(bits), bits);
    }
    let id = src[2u * j];
    let bits = src[2u * j + 1u];
    return vec3<u32>(id, select(key_of(bits), 0u, id == NONE), bits);
}

// Inclusive prefix sums of v over the invocations (all must call it).
fn prefix_scan(lid: u32, v: vec2<u32>) -> vec2<u32> {
    scan[lid] = v;
    workgroupBarrier();
    for (var off = 1u; off < WG; off = off << 1u) {
        var add = vec2<u32>(0u);
        if (lid >= off) {
            add = scan[lid - off];
        }
        workgroupBarrier();
        scan[lid] = scan[lid] + add;
        workgroupBarrier();
    }
    return scan[lid];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    var base = 0u;
    var count = p.n_in;
    if (MERGE == 0u) {
        base = wg.x * p.per;
        count = min(p.per, p.n_in - base);
    }
    let k = min(p.k, MAX_K);
    // Valid items.
    var nv = 0u;
    for (var j = lid; j < count; j = j + WG) {
        nv = nv + select(0u, 1u, item(base, j).y != 0u);
    }
    let need = min(k, prefix_scan(lid, vec2<u32>(nv, 0u)).x);
    // `need` is only right in the last invocation: share it.
    if (lid == WG - 1u) {
        sel = vec2<u32>(need, 0u);
    }
    workgroupBarrier();
    let n_take = sel.x;
    workgroupBarrier();
    // Radix select of the n_take-th largest key, 8 bits at a time from the top.
    var prefix = 0u;
    var mask = 0u;
    var remaining = n_take;
    for (var round = 0u; round < 4u; round = round + 1u) {
        let shift = 24u - 8u * round;
        atomicStore(&hist[lid], 0u);
        if (lid == 0u) {
            sel = vec2<u32>(0u);
        }
        workgroupBarrier();
        for (var j = lid; j < count; j = j + WG) {
            let key = item(base, j).y;
            if (key != 0u && (key & mask) == prefix) {
                atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
            }
        }
        workgroupBarrier();
        // Invocation i holds digit 255 − i: its inclusive prefix is the count of digits ≥ it.
        let dgt = 255u - lid;
        let h = atomicLoad(&hist[dgt]);
        let s = prefix_scan(lid, vec2<u32>(h, 0u)).x;
        if (remaining > 0u && s >= remaining && s - h < remaining) {
            sel = vec2<u32>(dgt, s - h);
        }
        workgroupBarrier();
        let sl = sel;
        prefix = prefix | (sl.x << shift);
        mask = mask | (0xffu << shift);
        remaining = remaining - min(sl.y, remaining);
        workgroupBarrier();
    }
    // prefix = T (the n_take-th key), remaining = ties of T to take, n_gt = keys above T.
    let t_key = prefix;
    let n_gt = n_take - remaining;
    let m = (count + WG - 1u) / WG;
    let j0 = min(lid * m, count);
    let j1 = min(j0 + m, count);
    var gt = 0u;
    var eq = 0u;
    for (var j = j0; j < j1; j = j + 1u) {
        let key = item(base, j).y;
        if (key != 0u && n_take > 0u) {
            gt = gt + select(0u, 1u, key > t_key);
            eq = eq + select(0u, 1u, key == t_key);
        }
    }
    let inc = prefix_scan(lid, vec2<u32>(gt, eq));
    var og = inc.x - gt;
    var oe = inc.y - eq;
    for (var j = j0; j < j1; j = j + 1u) {
        let it = item(base, j);
        if (it.y == 0u || n_take == 0u) {
            continue;
        }
        var slot = NONE;
        if (it.y > t_key) {
            slot = og;
            og = og + 1u;
        } else if (it.y == t_key) {
            if (oe < remaining) {
                slot = n_gt + oe;
            }
            oe = oe + 1u;
        }
        if (slot < MAX_K) {
            cand_id[slot] = it.x;
            cand_key[slot] = it.y;
            cand_bits[slot] = it.z;
        }
    }
    workgroupBarrier();
    if (lid < k) {
        let ob = wg.x * k;
        if (lid < n_take) {
            let ck = cand_key[lid];
            let ci = cand_id[lid];
            var rank = 0u;
            for (var j = 0u; j < n_take; j = j + 1u) {
                let kj = cand_key[j];
                if (kj > ck || (kj == ck && cand_id[j] < ci)) {
                    rank = rank + 1u;
                }
            }
            out[2u * (ob + rank)] = ci;
            out[2u * (ob + rank) + 1u] = cand_bits[lid];
        } else {
            out[2u * (ob + lid)] = NONE;
            out[2u * (ob + lid) + 1u] = NEG_INF;
        }
    }
}
