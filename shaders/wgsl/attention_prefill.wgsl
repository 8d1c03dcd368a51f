// Causal GQA attention for a prefill batch (tern_reference::kernels::attention), query-tiled:
// one workgroup serves TQ = 4 consecutive query tokens × up to 4 query heads sharing one kv head,
// so every key and value row it reads from the cache feeds 16 (token, head) pairs instead of the
// 4 of attention.wgsl (one token per workgroup) — a 512-token prefill reads the cache a quarter as
// often. f32 and f16 caches of a layer of its own (attention.wgsl serves every other format,
// MiniCache pairs and decode steps, where split-K matters more).
//
// Query token t sits at position p0 + t and attends keys 0 ..= p0 + t (n_kv(t) = min(p0 + t + 1,
// n_ctx)); the workgroup runs over the keys of its last token in tiles of 64, masking per token.
// Workgroup (x, y): x = kv head · n_hg + head group (attention.wgsl's), y = token tile (tokens
// 4y .. 4y + 3). Heads of a group are the 4 lanes of vec4s (lanes past the group repeat head h0).
// Per tile of 64 keys, two barriers:
//  1. scores: invocation (token tq = lid / 64, key kk = lid % 64) dots its token's 4 queries
//     (workgroup memory, a broadcast: the 32 invocations of a subgroup share the token) with its
//     key's row (16 dims per 4 loads in flight, vec4 loads) × scale, and raises the token's
//     running max (atomicMax on order-preserving u32 images: monotone, never reset);
//  2. after the barrier every invocation reads the maxima it needs: the scorer stores
//     exp(score − max) (0 for masked keys and past the tile), the value invocations rescale;
//  3. after the second barrier, values: invocation (dim d0 = lid % head_dim, token group tg =
//     lid / head_dim) accumulates tokens tg and tg + 256 / head_dim (head_dim 128: 2 tokens,
//     ≤ 64: 1, the invocations past 4 · head_dim idle) over the tile's keys, 8 value loads in
//     flight (consecutive invocations read
//     consecutive floats of a value row).
// The next tile's stores to `ex` follow its first barrier, which every invocation reaches only
// once done reading this tile's; its atomicMax follow this tile's second barrier, before which
// every invocation has read this tile's maxima.
// f32 throughout; the order of the sums differs from the reference's (NMSE ~1e-14), as
// attention.wgsl's. Needs head_dim a multiple of 16 and ≤ 128 and 16-byte-aligned cache rows
// (the launcher checks; attention.wgsl takes any other shape).
// Bindings as attention.wgsl's (split-free: `out` is [n_tokens][n_head·head_dim]), but token t's
// queries start at word t · q_stride of `q` (q_stride = n_head·head_dim for planar queries, the
// stacked row's length when they stay in the q/k/v projection's [n][q | k | v] rows that
// rope_kv.wgsl rotated in place); the caches are read as vec4<u32> (f32: 4 dims, f16: 8 per load).

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    scale: f32,
    n_tokens: u32,
    n_split: u32,
    n_hg: u32,
    q_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
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
@group(0) @binding(3) var<storage, read> kc: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> vc: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<uniform> g: Geom;

// 0 f32, 1 f16 (tern_format::KvQuant::ALL order).
override FMT: u32 = 0u;

const WG: u32 = 256u;
const TQ: u32 = 4u; // query tokens per workgroup
const TILE: u32 = 64u; // keys per tile (WG / TQ: one scorer per (token, key))
const GM: u32 = 4u; // query heads per workgroup (vec4 lanes)

// The tokens' queries [TQ][head_dim ≤ 128], 4 heads per vec4.
var<workgroup> qs: array<vec4<f32>, 512>;
// exp(score − max) of the tile [TQ][TILE].
var<workgroup> ex: array<vec4<f32>, 256>;
// Running max per (token, head).
var<workgroup> amax: array<atomic<u32>, 16>;

// Element e (f32 index into the cache words, or f16 index into its halves) of a cache row.
fn kv_at(is_key: bool, e: u32) -> f32 {
    if (FMT == 0u) {
        var w: vec4<u32>;
        if (is_key) {
            w = kc[e >> 2u];
        } else {
            w = vc[e >> 2u];
        }
        return bitcast<f32>(w[e & 3u]);
    }
    var w: vec4<u32>;
    if (is_key) {
        w = kc[e >> 3u];
    } else {
        w = vc[e >> 3u];
    }
    return f16_bits_to_f32((w[(e >> 1u) & 3u] >> ((e & 1u) * 16u)) & 0xffffu);
}

// f32: 4 key dims of one load. f16: the low (hi = false) or high 4 of its 8 dims.
fn dims4(w: vec4<u32>, hi: bool) -> vec4<f32> {
    if (FMT == 0u) {
        return bitcast<vec4<f32>>(w);
    }
    let a = select(w.x, w.z, hi);
    let b = select(w.y, w.w, hi);
    return vec4<f32>(
        f16_bits_to_f32(a & 0xffffu),
        f16_bits_to_f32(a >> 16u),
        f16_bits_to_f32(b & 0xffffu),
        f16_bits_to_f32(b >> 16u),
    );
}

// q · k over 4 dims from qs[qb ..]: the 4 heads' partial dots.
fn dot4q(qb: u32, k: vec4<f32>) -> vec4<f32> {
    return qs[qb] * k.x + qs[qb + 1u] * k.y + qs[qb + 2u] * k.z + qs[qb + 3u] * k.w;
}

fn n_kv_of(t: u32) -> u32 {
    return min(step.p0 + t + 1u, p.n_ctx);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kvh = wg.x / p.n_hg;
    let hgi = wg.x % p.n_hg;
    let t0 = wg.y * TQ;
    let group = p.n_head / p.n_head_kv;
    let h0 = kvh * group + hgi * GM;
    let nh = min(GM, group - hgi * GM);
    let hd = p.head_dim;
    let q_dim = p.n_head * hd;
    let koff = kvh * hd;
    let t_last = min(t0 + TQ, p.n_tokens) - 1u;
    let k_end = n_kv_of(t_last);
    // the queries (tokens past the batch: zeros, never written out)
    for (var i = lid; i < TQ * hd; i = i + WG) {
        let tq = i / hd;
        var v = vec4<f32>(0.0);
        if (t0 + tq < p.n_tokens) {
            let qb = (t0 + tq) * p.q_stride + h0 * hd + i % hd;
            v = vec4<f32>(
                q[qb],
                q[qb + select(0u, hd, nh > 1u)],
                q[qb + select(0u, 2u * hd, nh > 2u)],
                q[qb + select(0u, 3u * hd, nh > 3u)],
            );
        }
        qs[i] = v;
    }
    if (lid < TQ * GM) {
        atomicStore(&amax[lid], ord(-3.0e38));
    }
    workgroupBarrier();
    // scorer: token tq, key kk of the tile
    let tq = lid / TILE;
    let kk = lid % TILE;
    let n_kv_s = n_kv_of(t0 + tq);
    // value invocation: dim d0, tokens ta and tb (tb valid when has_b)
    let vg = WG / hd;
    let tg = lid / hd;
    let d0 = lid % hd;
    let v_on = tg < min(vg, TQ);
    let ta = tg;
    let tb = tg + vg;
    let has_b = v_on && tb < TQ;
    var m_a = vec4<f32>(-3.0e38);
    var m_b = vec4<f32>(-3.0e38);
    var l_a = vec4<f32>(0.0);
    var l_b = vec4<f32>(0.0);
    var acc_a = vec4<f32>(0.0);
    var acc_b = vec4<f32>(0.0);
    // elements per vec4 load of the cache, and the row's start of this kv head in loads
    let per = select(8u, 4u, FMT == 0u);
    let qb0 = tq * hd;
    for (var k0 = 0u; k0 < k_end; k0 = k0 + TILE) {
        let cnt = min(TILE, k_end - k0);
        let j = k0 + kk;
        let live = kk < cnt && j < n_kv_s;
        var sv = vec4<f32>(0.0);
        if (live) {
            let base = (j * g.row + koff) / per;
            var dot = vec4<f32>(0.0);
            if (FMT == 0u) {
                // 16 dims per step: 4 loads in flight
                for (var d = 0u; d < hd; d = d + 16u) {
                    let w0 = kc[base + d / 4u];
                    let w1 = kc[base + d / 4u + 1u];
                    let w2 = kc[base + d / 4u + 2u];
                    let w3 = kc[base + d / 4u + 3u];
                    dot = dot + dot4q(qb0 + d, dims4(w0, false))
                        + dot4q(qb0 + d + 4u, dims4(w1, false))
                        + dot4q(qb0 + d + 8u, dims4(w2, false))
                        + dot4q(qb0 + d + 12u, dims4(w3, false));
                }
            } else {
                // 32 dims per step: 4 loads of 8 halves in flight; then 16 (head_dim 16 · odd)
                var d = 0u;
                for (; d + 32u <= hd; d = d + 32u) {
                    let w0 = kc[base + d / 8u];
                    let w1 = kc[base + d / 8u + 1u];
                    let w2 = kc[base + d / 8u + 2u];
                    let w3 = kc[base + d / 8u + 3u];
                    dot = dot + dot4q(qb0 + d, dims4(w0, false))
                        + dot4q(qb0 + d + 4u, dims4(w0, true))
                        + dot4q(qb0 + d + 8u, dims4(w1, false))
                        + dot4q(qb0 + d + 12u, dims4(w1, true))
                        + dot4q(qb0 + d + 16u, dims4(w2, false))
                        + dot4q(qb0 + d + 20u, dims4(w2, true))
                        + dot4q(qb0 + d + 24u, dims4(w3, false))
                        + dot4q(qb0 + d + 28u, dims4(w3, true));
                }
                if (d < hd) {
                    let w0 = kc[base + d / 8u];
                    let w1 = kc[base + d / 8u + 1u];
                    dot = dot + dot4q(qb0 + d, dims4(w0, false))
                        + dot4q(qb0 + d + 4u, dims4(w0, true))
                        + dot4q(qb0 + d + 8u, dims4(w1, false))
                        + dot4q(qb0 + d + 12u, dims4(w1, true));
                }
            }
            sv = dot * p.scale;
            atomicMax(&amax[tq * GM], ord(sv.x));
            atomicMax(&amax[tq * GM + 1u], ord(sv.y));
            atomicMax(&amax[tq * GM + 2u], ord(sv.z));
            atomicMax(&amax[tq * GM + 3u], ord(sv.w));
        }
        workgroupBarrier();
        let ms = vec4<f32>(
            unord(atomicLoad(&amax[tq * GM])),
            unord(atomicLoad(&amax[tq * GM + 1u])),
            unord(atomicLoad(&amax[tq * GM + 2u])),
            unord(atomicLoad(&amax[tq * GM + 3u])),
        );
        ex[tq * TILE + kk] = select(vec4<f32>(0.0), exp(sv - ms), vec4<bool>(live));
        let ta_c = min(ta, TQ - 1u);
        let tb_c = min(tb, TQ - 1u);
        let na = vec4<f32>(
            unord(atomicLoad(&amax[ta_c * GM])),
            unord(atomicLoad(&amax[ta_c * GM + 1u])),
            unord(atomicLoad(&amax[ta_c * GM + 2u])),
            unord(atomicLoad(&amax[ta_c * GM + 3u])),
        );
        let nb = vec4<f32>(
            unord(atomicLoad(&amax[tb_c * GM])),
            unord(atomicLoad(&amax[tb_c * GM + 1u])),
            unord(atomicLoad(&amax[tb_c * GM + 2u])),
            unord(atomicLoad(&amax[tb_c * GM + 3u])),
        );
        let ca = exp(m_a - na);
        let cb = exp(m_b - nb);
        m_a = na;
        m_b = nb;
        l_a = l_a * ca;
        acc_a = acc_a * ca;
        l_b = l_b * cb;
        acc_b = acc_b * cb;
        workgroupBarrier();
        if (v_on) {
            let ea = ta * TILE;
            let eb = tb_c * TILE;
            let vrow = koff + d0;
            var jj = 0u;
            // 8 value rows in flight, then the rest
            for (; jj + 8u <= cnt; jj = jj + 8u) {
                let e = (k0 + jj) * g.row + vrow;
                let a0 = kv_at(false, e);
                let a1 = kv_at(false, e + g.row);
                let a2 = kv_at(false, e + 2u * g.row);
                let a3 = kv_at(false, e + 3u * g.row);
                let a4 = kv_at(false, e + 4u * g.row);
                let a5 = kv_at(false, e + 5u * g.row);
                let a6 = kv_at(false, e + 6u * g.row);
                let a7 = kv_at(false, e + 7u * g.row);
                let x0 = ex[ea + jj];
                let x1 = ex[ea + jj + 1u];
                let x2 = ex[ea + jj + 2u];
                let x3 = ex[ea + jj + 3u];
                let x4 = ex[ea + jj + 4u];
                let x5 = ex[ea + jj + 5u];
                let x6 = ex[ea + jj + 6u];
                let x7 = ex[ea + jj + 7u];
                l_a = l_a + x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
                acc_a = acc_a + x0 * a0 + x1 * a1 + x2 * a2 + x3 * a3 + x4 * a4 + x5 * a5
                    + x6 * a6 + x7 * a7;
                if (has_b) {
                    let y0 = ex[eb + jj];
                    let y1 = ex[eb + jj + 1u];
                    let y2 = ex[eb + jj + 2u];
                    let y3 = ex[eb + jj + 3u];
                    let y4 = ex[eb + jj + 4u];
                    let y5 = ex[eb + jj + 5u];
                    let y6 = ex[eb + jj + 6u];
                    let y7 = ex[eb + jj + 7u];
                    l_b = l_b + y0 + y1 + y2 + y3 + y4 + y5 + y6 + y7;
                    acc_b = acc_b + y0 * a0 + y1 * a1 + y2 * a2 + y3 * a3 + y4 * a4 + y5 * a5
                        + y6 * a6 + y7 * a7;
                }
            }
            for (; jj < cnt; jj = jj + 1u) {
                let a = kv_at(false, (k0 + jj) * g.row + vrow);
                let x = ex[ea + jj];
                l_a = l_a + x;
                acc_a = acc_a + x * a;
                if (has_b) {
                    let y = ex[eb + jj];
                    l_b = l_b + y;
                    acc_b = acc_b + y * a;
                }
            }
        }
    }
    if (!v_on) {
        return;
    }
    let inv_a = 1.0 / l_a;
    let inv_b = 1.0 / l_b;
    for (var h = 0u; h < GM; h = h + 1u) {
        if (h < nh) {
            let col = (h0 + h) * hd + d0;
            if (t0 + ta < p.n_tokens) {
                out[(t0 + ta) * q_dim + col] = acc_a[h] * inv_a[h];
            }
            if (has_b && t0 + tb < p.n_tokens) {
                out[(t0 + tb) * q_dim + col] = acc_b[h] * inv_b[h];
            }
        }
    }
}
