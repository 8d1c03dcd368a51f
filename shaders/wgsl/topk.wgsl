// Top-k of one row of logits for sampling on the GPU: the k largest values, sorted by
// (value descending, index ascending), as (u32 id, f32 value) pairs; slots past the number of
// candidates hold (0xffffffff, -inf). NaN logits are never candidates. Exact (selection only).
//
// Two passes (override MERGE): pass 1 (MERGE = 0) — workgroup g takes logits
// [g·per, (g+1)·per) and writes its own top-k to pairs [g][k]; pass 2 (MERGE = 1, one workgroup)
// takes the n_in candidate pairs of pass 1 and writes the final top-k. With one workgroup of
// logits, pass 1 writes the final result directly.
// Selection: each invocation holds a stride of the input and knows its best item not yet taken
// (items are taken in the total order, so "not yet taken" = after the last item it gave up);
// k rounds of a workgroup max-reduction pick the next item, and only its owner rescans.
// Bindings: params; input (MERGE 0: f32 logits as u32 bits; MERGE 1: pairs); out pairs.

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
const NONE: u32 = 0xffffffffu;
const NEG_INF: u32 = 0xff800000u;
var<workgroup> rv: array<f32, 256>;
var<workgroup> ri: array<u32, 256>;

// (v, i) comes before (bv, bi) in the output order; NONE ids come last.
fn before(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if (i == NONE) {
        return false;
    }
    return bi == NONE || v > bv || (v == bv && i < bi);
}

// Item j (j < count) of this workgroup's input: (id, value); id NONE when absent or NaN.
fn item(base: u32, j: u32) -> vec2<u32> {
    if (MERGE == 0u) {
        let bits = src[base + j];
        if ((bits & 0x7fffffffu) > 0x7f800000u) {
            return vec2<u32>(NONE, NEG_INF);
        }
        return vec2<u32>(base + j, bits);
    }
    return vec2<u32>(src[2u * j], src[2u * j + 1u]);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    var base = 0u;
    var count = p.n_in;
    if (MERGE == 0u) {
        base = wg.x * p.per;
        count = min(p.per, p.n_in - base);
    }
    // Best item of this invocation after (lv, li) in the order (everything when li = NONE).
    var lv = 0.0;
    var li = NONE;
    var bv = 0.0;
    var bi = NONE;
    for (var j = lid; j < count; j = j + WG) {
        let it = item(base, j);
        let v = bitcast<f32>(it.y);
        if (before(v, it.x, bv, bi)) {
            bv = v;
            bi = it.x;
        }
    }
    for (var r = 0u; r < p.k; r = r + 1u) {
        rv[lid] = bv;
        ri[lid] = bi;
        workgroupBarrier();
        for (var st = WG / 2u; st > 0u; st = st >> 1u) {
            if (lid < st) {
                if (before(rv[lid + st], ri[lid + st], rv[lid], ri[lid])) {
                    rv[lid] = rv[lid + st];
                    ri[lid] = ri[lid + st];
                }
            }
            workgroupBarrier();
        }
        let wv = rv[0];
        let wi = ri[0];
        if (lid == 0u) {
            let o = 2u * (wg.x * p.k + r);
            out[o] = wi;
            out[o + 1u] = select(bitcast<u32>(wv), NEG_INF, wi == NONE);
        }
        if (wi != NONE && wi == bi) {
            // This invocation's best was taken: the next one after it.
            lv = bv;
            li = bi;
            bv = 0.0;
            bi = NONE;
            for (var j = lid; j < count; j = j + WG) {
                let it = item(base, j);
                let v = bitcast<f32>(it.y);
                if (before(lv, li, v, it.x) && before(v, it.x, bv, bi)) {
                    bv = v;
                    bi = it.x;
                }
            }
        }
        workgroupBarrier();
    }
}
