// Fused Cut-Cross-Entropy, pass B: per position, merge the (max, sum) partials of every vocab
// block (all head parts) in block order, `M = max m_j`, `S = Σ s_j · exp(m_j − M)` (online, in
// j order: deterministic), then `log p(target) = z_target − (M + ln S)`. A target outside the
// vocabulary gives NaN. One invocation per position; reads are coalesced over positions.
// Bindings: part   scratch of pass A ([n_blocks][n_pos] (max, sum) pairs, then [n_pos] target
//                  logits); targets [*] u32, indexed pos0 + p; out [*] f32, written at pos0 + p.

// #import common

struct Params {
    n_pos: u32,
    pos0: u32,
    n_blocks: u32,
    vocab: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const NEG: f32 = -3.0e38;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let q = gid.x;
    if (q >= p.n_pos) {
        return;
    }
    var m = NEG;
    var s = 0.0;
    for (var b = 0u; b < p.n_blocks; b = b + 1u) {
        let o = 2u * (b * p.n_pos + q);
        let mj = part[o];
        let sj = part[o + 1u];
        let mn = max(m, mj);
        s = s * exp(m - mn) + sj * exp(mj - mn);
        m = mn;
    }
    let t = targets[p.pos0 + q];
    var lp = bitcast<f32>(0x7fc00000u);
    if (t < p.vocab) {
        lp = part[2u * p.n_blocks * p.n_pos + q] - (m + log(s));
    }
    out[p.pos0 + q] = lp;
}
