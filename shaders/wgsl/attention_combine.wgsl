// Merge of split-K attention partials (attention.wgsl with n_split > 1): for token t and head h,
// out[t][h][d] = Σ_s e_s · acc_s[d] / Σ_s e_s · l_s with e_s = exp(m_s − max_s m_s), over the
// non-empty splits s (the same chunking as attention.wgsl: max(ceil(n_kv / n_split), 32) keys).
// Workgroup (h, t); invocations stride over the dims.
// Bindings: params; step; partials [n_tokens][n_head][n_split][head_dim + 2] (m, l, acc);
// out [n_tokens][n_head·head_dim].

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    scale: f32,
    n_tokens: u32,
    n_split: u32,
    n_hg: u32,
}

struct Step {
    p0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 128u;
const MIN_CHUNK: u32 = 32u;
// exp(m_s − max) per split (the launcher keeps n_split ≤ WG).
var<workgroup> ws: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let t = wg.y;
    let hd = p.head_dim;
    let n_kv = min(step.p0 + t + 1u, p.n_ctx);
    let chunk = max((n_kv + p.n_split - 1u) / p.n_split, MIN_CHUNK);
    let ns = min(p.n_split, (n_kv + chunk - 1u) / chunk);
    let base = (t * p.n_head + h) * p.n_split * (hd + 2u);
    var mx = -3.0e38;
    for (var s = 0u; s < ns; s = s + 1u) {
        mx = max(mx, part[base + s * (hd + 2u)]);
    }
    if (lid < ns) {
        ws[lid] = exp(part[base + lid * (hd + 2u)] - mx);
    }
    workgroupBarrier();
    var den = 0.0;
    for (var s = 0u; s < ns; s = s + 1u) {
        den = den + ws[s] * part[base + s * (hd + 2u) + 1u];
    }
    let inv = 1.0 / den;
    for (var d = lid; d < hd; d = d + WG) {
        var num = 0.0;
        for (var s = 0u; s < ns; s = s + 1u) {
            num = num + ws[s] * part[base + s * (hd + 2u) + 2u + d];
        }
        out[(t * p.n_head + h) * hd + d] = num * inv;
    }
}
