// The materialized counterpart of the fused CCE scorer (for comparison and benchmarks):
// `out[pos0 + r] = logits[r][t] − log Σ_v exp(logits[r][v])` with t = targets[pos0 + r], from a
// `[n_pos][vocab]` f32 logit matrix. One workgroup per row: each invocation keeps an online
// (max, Σ exp) over its strided columns, then a fixed-order tree merge (deterministic). A target
// outside the vocabulary gives NaN.
// Bindings: logits [n_pos][vocab] f32; targets [*] u32; out [*] f32.

// #import common

struct Params {
    vocab: u32,
    n_pos: u32,
    pos0: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
const NEG: f32 = -3.0e38;
var<workgroup> wm: array<f32, 256>;
var<workgroup> wsum: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r = wg.x;
    var m = NEG;
    var s = 0.0;
    if (r < p.n_pos) {
        let base = r * p.vocab;
        for (var c = lid; c < p.vocab; c = c + WG) {
            let z = logits[base + c];
            let mn = max(m, z);
            s = s * exp(m - mn) + exp(z - mn);
            m = mn;
        }
    }
    wm[lid] = m;
    wsum[lid] = s;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            let m1 = wm[lid];
            let m2 = wm[lid + st];
            let mn = max(m1, m2);
            wsum[lid] = wsum[lid] * exp(m1 - mn) + wsum[lid + st] * exp(m2 - mn);
            wm[lid] = mn;
        }
        workgroupBarrier();
    }
    if (lid == 0u && r < p.n_pos) {
        let t = targets[p.pos0 + r];
        var lp = bitcast<f32>(0x7fc00000u);
        if (t < p.vocab) {
            lp = logits[r * p.vocab + t] - (wm[0] + log(wsum[0]));
        }
        out[p.pos0 + r] = lp;
    }
}
