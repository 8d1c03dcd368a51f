// Merge of split-K attention partials (attention.wgsl with n_split > 1): for token t and head h,
// out[t][h][d] = Σ_s e_s · acc_s[d] / Σ_s e_s · l_s with e_s = exp(m_s − max_s m_s), over the
// non-empty splits s (the same chunking as attention.wgsl: max(ceil(n_kv / n_split), 32) keys).
// Workgroup (h · n_dc + c, t) does dims [32c, 32c + 32) of head h: invocation s < n_split reads
// (m_s, l_s), the max and Σ e_s · l_s are tree reductions in workgroup memory (fixed order:
// deterministic), then invocation i sums splits i / 32, i / 32 + 8, ... of dim 32c + i % 32 (8
// loads in flight at a time: the splits are independent, and a decode step waits on this chain)
// and the 8 split groups are added in order.
// Bindings: params; step; partials [n_tokens][n_head][n_split][head_dim + 2] (m, l, acc);
// out [n_tokens][n_head·head_dim].

// #import common
// #import kv_step
// #import attention_params

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
// Dims per workgroup, and split groups (WG / DS).
const DS: u32 = 32u;
const SG: u32 = 8u;
const MIN_CHUNK: u32 = 32u;
// exp(m_s − max) per split (the launcher keeps n_split ≤ 128).
var<workgroup> ws: array<f32, 128>;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let hd = p.head_dim;
    let n_dc = (hd + DS - 1u) / DS;
    let h = wg.x / n_dc;
    let dc = wg.x % n_dc;
    let t = wg.y;
    let stride = hd + 2u;
    let n_kv = min(step.p0 + t + 1u, p.n_ctx);
    // the keys attention.wgsl chunked: the last min(n_kv, window) with a sliding window
    let n_win = select(n_kv, min(n_kv, p.window), p.window > 0u);
    let chunk = max((n_win + p.n_split - 1u) / p.n_split, MIN_CHUNK);
    let ns = min(p.n_split, (n_win + chunk - 1u) / chunk);
    let base = (t * p.n_head + h) * p.n_split * stride;
    var mv = -3.0e38;
    var lv = 0.0;
    if (lid < ns) {
        mv = part[base + lid * stride];
        lv = part[base + lid * stride + 1u];
    }
    red[lid] = mv;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            red[lid] = max(red[lid], red[lid + st]);
        }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();
    var w = 0.0;
    if (lid < ns) {
        w = exp(mv - mx);
        ws[lid] = w;
    }
    red[lid] = w * lv;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            red[lid] = red[lid] + red[lid + st];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    workgroupBarrier();
    let dl = lid % DS;
    let sg = lid / DS;
    let d = dc * DS + dl;
    var num = 0.0;
    if (d < hd) {
        let b = base + 2u + d;
        var s = sg;
        for (; s + 7u * SG < ns; s = s + 8u * SG) {
            let a0 = part[b + s * stride];
            let a1 = part[b + (s + SG) * stride];
            let a2 = part[b + (s + 2u * SG) * stride];
            let a3 = part[b + (s + 3u * SG) * stride];
            let a4 = part[b + (s + 4u * SG) * stride];
            let a5 = part[b + (s + 5u * SG) * stride];
            let a6 = part[b + (s + 6u * SG) * stride];
            let a7 = part[b + (s + 7u * SG) * stride];
            num = num + ws[s] * a0 + ws[s + SG] * a1 + ws[s + 2u * SG] * a2
                + ws[s + 3u * SG] * a3 + ws[s + 4u * SG] * a4 + ws[s + 5u * SG] * a5
                + ws[s + 6u * SG] * a6 + ws[s + 7u * SG] * a7;
        }
        for (; s < ns; s = s + SG) {
            num = num + ws[s] * part[b + s * stride];
        }
    }
    red[lid] = num;
    workgroupBarrier();
    if (lid < DS && d < hd) {
        var sum = 0.0;
        for (var g = 0u; g < SG; g = g + 1u) {
            sum = sum + red[g * DS + lid];
        }
        out[(t * p.n_head + h) * hd + d] = sum * inv;
    }
}
