// Causal grouped-query attention over the KV cache (tern_reference::kernels::attention), split-K
// ("flash decoding") so that a decode step with few heads still fills the GPU.
//
// Query token t sits at position p0 + t (p0 from the step buffer) and attends keys
// 0 ..= p0 + t (n_kv = min(p0 + t + 1, n_ctx) of them) of kv head h / (n_head / n_head_kv).
// Workgroup (x, t, s): x = kv head · n_hg + head group; a head group is up to 4 query heads
// sharing one kv head (their scores and outputs are the 4 lanes of vec4s), so each key and value
// row is read once for 4 heads. s = split: the keys are cut into n_split chunks of
// ceil(n_kv / n_split) rounded up to a tile (128 keys); chunk s is [s·chunk, min((s+1)·chunk, n_kv)),
// empty chunks return at once (the chunk size follows p0, so one recorded dispatch serves every
// position).
// In a tile each invocation scores one key (q · k · scale, 4 heads at once), the running max is a
// workgroup atomicMax on order-preserving u32 images of the scores (monotone over tiles, so it
// never needs resetting), each invocation keeps its own Σ exp (rescaled with the max), and the
// output accumulator (invocation i owns dims i and i + 128 of the 4 heads) is rescaled and
// updated from the tile's exp(score − max) in workgroup memory (online softmax).
// n_split = 1: out = acc / Σ. Otherwise the unnormalized (max, Σ, acc[head_dim]) of each
// (token, head, split) go to `out` as partials, merged by attention_combine.wgsl.
// f32 throughout; the order of the sums differs from the reference's (NMSE ~1e-14).
// Bindings: params; step; q [n_tokens][n_head·head_dim]; k_cache, v_cache [n_ctx][n_head_kv·head_dim];
// out: [n_tokens][n_head·head_dim], or partials [n_tokens][n_head][n_split][head_dim + 2].

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
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<f32>;
@group(0) @binding(4) var<storage, read> vc: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

const WG: u32 = 128u;
const TILE: u32 = 128u;
const GM: u32 = 4u;
var<workgroup> qs: array<vec4<f32>, 256>;
var<workgroup> sc: array<vec4<f32>, 128>;
var<workgroup> amax: array<atomic<u32>, 4>;

// f32 → u32 with the same order (for atomicMax), and back.
fn ord(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn unord(u: u32) -> f32 {
    return bitcast<f32>(select(~u, u & 0x7fffffffu, (u & 0x80000000u) != 0u));
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kvh = wg.x / p.n_hg;
    let hgi = wg.x % p.n_hg;
    let t = wg.y;
    let s = wg.z;
    let group = p.n_head / p.n_head_kv;
    let h0 = kvh * group + hgi * GM;
    let nh = min(GM, group - hgi * GM);
    let hd = p.head_dim;
    let q_dim = p.n_head * hd;
    let row = p.n_head_kv * hd;
    let koff = kvh * hd;
    let n_kv = min(step.p0 + t + 1u, p.n_ctx);
    let per = (n_kv + p.n_split - 1u) / p.n_split;
    let chunk = (per + TILE - 1u) / TILE * TILE;
    let k_begin = s * chunk;
    if (k_begin >= n_kv) {
        return;
    }
    let k_end = min(k_begin + chunk, n_kv);
    for (var d = lid; d < hd; d = d + WG) {
        var v = vec4<f32>(0.0);
        for (var g = 0u; g < GM; g = g + 1u) {
            if (g < nh) {
                v[g] = q[t * q_dim + (h0 + g) * hd + d];
            }
        }
        qs[d] = v;
    }
    if (lid < GM) {
        atomicStore(&amax[lid], ord(-3.0e38));
    }
    workgroupBarrier();
    var m = vec4<f32>(-3.0e38);
    var l = vec4<f32>(0.0);
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    let d0 = lid;
    let d1 = lid + WG;
    for (var k0 = k_begin; k0 < k_end; k0 = k0 + TILE) {
        let k = k0 + lid;
        let valid = k < k_end;
        var sv = vec4<f32>(0.0);
        if (valid) {
            let kb = k * row + koff;
            var dot = vec4<f32>(0.0);
            var d = 0u;
            for (; d + 4u <= hd; d = d + 4u) {
                dot = dot + qs[d] * kc[kb + d] + qs[d + 1u] * kc[kb + d + 1u]
                    + qs[d + 2u] * kc[kb + d + 2u] + qs[d + 3u] * kc[kb + d + 3u];
            }
            for (; d < hd; d = d + 1u) {
                dot = dot + qs[d] * kc[kb + d];
            }
            sv = dot * p.scale;
            atomicMax(&amax[0], ord(sv.x));
            atomicMax(&amax[1], ord(sv.y));
            atomicMax(&amax[2], ord(sv.z));
            atomicMax(&amax[3], ord(sv.w));
        }
        workgroupBarrier();
        let m_new = vec4<f32>(
            unord(atomicLoad(&amax[0])),
            unord(atomicLoad(&amax[1])),
            unord(atomicLoad(&amax[2])),
            unord(atomicLoad(&amax[3])),
        );
        let e = select(vec4<f32>(0.0), exp(sv - m_new), valid);
        let corr = exp(m - m_new);
        l = l * corr + e;
        acc0 = acc0 * corr;
        acc1 = acc1 * corr;
        m = m_new;
        sc[lid] = e;
        workgroupBarrier();
        let cnt = min(TILE, k_end - k0);
        let vb0 = k0 * row + koff;
        if (d1 < hd) {
            for (var j = 0u; j < cnt; j = j + 1u) {
                let pj = sc[j];
                let vb = vb0 + j * row;
                acc0 = acc0 + pj * vc[vb + d0];
                acc1 = acc1 + pj * vc[vb + d1];
            }
        } else if (d0 < hd) {
            for (var j = 0u; j < cnt; j = j + 1u) {
                acc0 = acc0 + sc[j] * vc[vb0 + j * row + d0];
            }
        }
        workgroupBarrier();
    }
    // Σ exp over the invocations.
    sc[lid] = l;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            sc[lid] = sc[lid] + sc[lid + st];
        }
        workgroupBarrier();
    }
    let lsum = sc[0];
    if (p.n_split == 1u) {
        let inv = 1.0 / lsum;
        for (var g = 0u; g < GM; g = g + 1u) {
            if (g < nh) {
                let ob = t * q_dim + (h0 + g) * hd;
                if (d0 < hd) {
                    out[ob + d0] = acc0[g] * inv[g];
                }
                if (d1 < hd) {
                    out[ob + d1] = acc1[g] * inv[g];
                }
            }
        }
        return;
    }
    for (var g = 0u; g < GM; g = g + 1u) {
        if (g < nh) {
            let pb = ((t * p.n_head + h0 + g) * p.n_split + s) * (hd + 2u);
            if (lid == 0u) {
                out[pb] = m[g];
                out[pb + 1u] = lsum[g];
            }
            if (d0 < hd) {
                out[pb + 2u + d0] = acc0[g];
            }
            if (d1 < hd) {
                out[pb + 2u + d1] = acc1[g];
            }
        }
    }
}
