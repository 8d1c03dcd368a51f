// Causal grouped-query attention over the KV cache (tern_reference::kernels::attention).
// One workgroup per (query head, token): token t sits at position p0 + t (p0 from the step buffer)
// and attends keys 0..=p0+t of kv head h / (n_head / n_head_kv). Keys go in tiles of WG: each
// invocation scores one key of the tile (q · k · scale), the tile's max and the sum of exp are
// workgroup reductions, and the output accumulator (invocation i owns dims i, i + WG) is rescaled
// as the running max grows (online softmax). f32 throughout; the order of the sums differs from
// the reference's (NMSE ~1e-14).
// Bindings: params; step; q [n_tokens][n_head·head_dim]; k_cache, v_cache [n_ctx][n_head_kv·head_dim];
// out [n_tokens][n_head·head_dim].

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    scale: f32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

struct Step {
    p0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<f32>;
@group(0) @binding(4) var<storage, read> vc: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

const WG: u32 = 128u;
const MAX_HD: u32 = 256u;
var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, 128>;
var<workgroup> red: array<f32, 128>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let t = wg.y;
    let hd = p.head_dim;
    let q_dim = p.n_head * hd;
    let row = p.n_head_kv * hd;
    let kvh = h / (p.n_head / p.n_head_kv);
    let koff = kvh * hd;
    let qbase = t * q_dim + h * hd;
    for (var d = lid; d < hd; d = d + WG) {
        qs[d] = q[qbase + d];
    }
    workgroupBarrier();
    let n_kv = min(step.p0 + t + 1u, p.n_ctx);
    var m = -3.0e38;
    var l = 0.0;
    var acc0 = 0.0;
    var acc1 = 0.0;
    let d0 = lid;
    let d1 = lid + WG;
    for (var k0 = 0u; k0 < n_kv; k0 = k0 + WG) {
        let k = k0 + lid;
        var s = -3.0e38;
        if (k < n_kv) {
            var dot = 0.0;
            let kb = k * row + koff;
            for (var d = 0u; d < hd; d = d + 1u) {
                dot = dot + qs[d] * kc[kb + d];
            }
            s = dot * p.scale;
        }
        let tmax = reduce_max(lid, s);
        let m_new = max(m, tmax);
        var e = 0.0;
        if (k < n_kv) {
            e = exp(s - m_new);
        }
        sc[lid] = e;
        let tsum = reduce_sum(lid, e);
        let corr = exp(m - m_new);
        l = l * corr + tsum;
        acc0 = acc0 * corr;
        acc1 = acc1 * corr;
        let cnt = min(WG, n_kv - k0);
        for (var j = 0u; j < cnt; j = j + 1u) {
            let pj = sc[j];
            let vb = (k0 + j) * row + koff;
            if (d0 < hd) {
                acc0 = acc0 + pj * vc[vb + d0];
            }
            if (d1 < hd) {
                acc1 = acc1 + pj * vc[vb + d1];
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    let inv = 1.0 / l;
    if (d0 < hd) {
        out[qbase + d0] = acc0 * inv;
    }
    if (d1 < hd) {
        out[qbase + d1] = acc1 * inv;
    }
}
