// Causal GQA attention for a prefill batch (tern_reference::kernels::attention), query-tiled:
// one workgroup serves TQ = 4 consecutive query tokens × up to 4 query heads sharing one kv head,
// so every key and value row it reads from the cache feeds 16 (token, head) pairs instead of the
// 4 of attention.wgsl (one token per workgroup) — a 512-token prefill reads the cache a quarter as
// often. f32 and f16 caches of a layer of its own (attention.wgsl serves every other format,
// MiniCache pairs and decode steps, where split-K matters more).
//
// Query token t sits at position p0 + t and attends keys 0 ..= p0 + t (n_kv(t) = min(p0 + t + 1,
// n_ctx)); the workgroup runs over the keys of its last token in tiles of 64, masking per token.
// Workgroup (x, y): x = kv head · n_hg + head group (attention.wgsl's), y = token tile, the
// batch's last first (the longest key ranges start first).
// Latency: a tile costs one round trip per 8 key loads of a row and per 16 value rows (a version
// with 4 and 8 in flight ran 8.0 ms per 2B4T pp512, this one 7.8, attention.wgsl 6.9: H100). So
// the launcher takes it only with TERN_GPU_ATTN_PREFILL=1 (kernels/attention.rs, prefill_pays).
// Heads of a group are the 4 lanes of vec4s (lanes past the group repeat head h0).
// Per tile of 64 keys, two barriers:
//  1. scores: invocation (token tq = lid / 64, key kk = lid % 64) dots its token's 4 queries
//     (workgroup memory, a broadcast: the 32 invocations of a subgroup share the token) with its
//     key's row (vec4 loads, 8 in flight: 32 dims of f32, 64 of f16) × scale, and raises the
//     token's running max (atomicMax on order-preserving u32 images: monotone, never reset);
//  2. after the barrier every invocation reads the maxima it needs: the scorer stores
//     exp(score − max) (0 for masked keys and past the tile), the value invocations rescale;
//  3. after the second barrier, values: invocation (dim d0 = lid % head_dim, token group tg =
//     lid / head_dim) accumulates tokens tg and tg + 256 / head_dim (head_dim 128: 2 tokens,
//     ≤ 64: 1, the invocations past 4 · head_dim idle) over the tile's keys, 16 value loads in
//     flight (consecutive invocations read consecutive floats of a value row).
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

// #import common
// #import kv_step
// #import attention_params
// #import kv_formats

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> vc: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<uniform> g: Geom;


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

// The value invocation's accumulators (tokens ta and tb: Σ e · v, Σ e) and where its tokens'
// exp values start in `ex` (vectors with constant components stay in registers).
var<private> acc_a: vec4<f32>;
var<private> acc_b: vec4<f32>;
var<private> l_a: vec4<f32>;
var<private> l_b: vec4<f32>;
var<private> ea: u32;
var<private> eb: u32;
var<private> has_b: bool;

// Key j of the tile with value a: into both tokens' sums.
fn take(j: u32, a: f32) {
    let x = ex[ea + j];
    l_a = l_a + x;
    acc_a = acc_a + x * a;
    if (has_b) {
        let y = ex[eb + j];
        l_b = l_b + y;
        acc_b = acc_b + y * a;
    }
}

// Element e (f32 index into the cache words, or f16 index into its halves) of a value row (keys
// are read a whole load at a time: kdot).
fn v_at(e: u32) -> f32 {
    if (FMT == FMT_F32) {
        return bitcast<f32>(vc[e >> 2u][e & 3u]);
    }
    let w = vc[e >> 3u];
    return f16_bits_to_f32((w[(e >> 1u) & 3u] >> ((e & 1u) * 16u)) & 0xffffu);
}

// f32: 4 key dims of one load. f16: the low (hi = false) or high 4 of its 8 dims.
fn dims4(w: vec4<u32>, hi: bool) -> vec4<f32> {
    if (FMT == FMT_F32) {
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

// One cache load's worth of a key row against the token's queries from qs[e ..] (f32: 4 dims,
// f16: 8).
fn kdot(w: vec4<u32>, e: u32) -> vec4<f32> {
    if (FMT == FMT_F32) {
        return dot4q(e, dims4(w, false));
    }
    return dot4q(e, dims4(w, false)) + dot4q(e + 4u, dims4(w, true));
}

fn n_kv_of(t: u32) -> u32 {
    return min(step.p0 + t + 1u, p.n_ctx);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kvh = wg.x / p.n_hg;
    let hgi = wg.x % p.n_hg;
    // the longest token tiles (the batch's last) first: they bound the dispatch
    let t0 = ((p.n_tokens + TQ - 1u) / TQ - 1u - wg.y) * TQ;
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
    has_b = v_on && tb < TQ;
    var m_a = vec4<f32>(-3.0e38);
    var m_b = vec4<f32>(-3.0e38);
    l_a = vec4<f32>(0.0);
    l_b = vec4<f32>(0.0);
    acc_a = vec4<f32>(0.0);
    acc_b = vec4<f32>(0.0);
    // elements per vec4 load of the cache, and the row's start of this kv head in loads
    let per = select(8u, 4u, FMT == FMT_F32);
    let qb0 = tq * hd;
    for (var k0 = 0u; k0 < k_end; k0 = k0 + TILE) {
        let cnt = min(TILE, k_end - k0);
        let j = k0 + kk;
        let live = kk < cnt && j < n_kv_s;
        var sv = vec4<f32>(0.0);
        if (live) {
            let base = (j * g.row + koff) / per;
            // the row's loads (f32: 4 dims each, f16: 8), 8 in flight per step (one round trip
            // per 32 / 64 dims), the last step's past the row masked
            let nl = hd / per;
            var dot = vec4<f32>(0.0);
            for (var i = 0u; i < nl; i = i + 8u) {
                let w0 = kc[base + i];
                let w1 = kc[base + min(i + 1u, nl - 1u)];
                let w2 = kc[base + min(i + 2u, nl - 1u)];
                let w3 = kc[base + min(i + 3u, nl - 1u)];
                let w4 = kc[base + min(i + 4u, nl - 1u)];
                let w5 = kc[base + min(i + 5u, nl - 1u)];
                let w6 = kc[base + min(i + 6u, nl - 1u)];
                let w7 = kc[base + min(i + 7u, nl - 1u)];
                let e = qb0 + i * per;
                dot = dot + kdot(w0, e);
                if (i + 1u < nl) {
                    dot = dot + kdot(w1, e + per);
                }
                if (i + 2u < nl) {
                    dot = dot + kdot(w2, e + 2u * per);
                }
                if (i + 3u < nl) {
                    dot = dot + kdot(w3, e + 3u * per);
                }
                if (i + 4u < nl) {
                    dot = dot + kdot(w4, e + 4u * per);
                }
                if (i + 5u < nl) {
                    dot = dot + kdot(w5, e + 5u * per);
                }
                if (i + 6u < nl) {
                    dot = dot + kdot(w6, e + 6u * per);
                }
                if (i + 7u < nl) {
                    dot = dot + kdot(w7, e + 7u * per);
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
            ea = ta * TILE;
            eb = tb_c * TILE;
            let vrow = koff + d0;
            let r = g.row;
            var jj = 0u;
            // 16 value rows in flight, then the rest
            for (; jj + 16u <= cnt; jj = jj + 16u) {
                let e = (k0 + jj) * r + vrow;
                let a0 = v_at(e);
                let a1 = v_at(e + r);
                let a2 = v_at(e + 2u * r);
                let a3 = v_at(e + 3u * r);
                let a4 = v_at(e + 4u * r);
                let a5 = v_at(e + 5u * r);
                let a6 = v_at(e + 6u * r);
                let a7 = v_at(e + 7u * r);
                let a8 = v_at(e + 8u * r);
                let a9 = v_at(e + 9u * r);
                let a10 = v_at(e + 10u * r);
                let a11 = v_at(e + 11u * r);
                let a12 = v_at(e + 12u * r);
                let a13 = v_at(e + 13u * r);
                let a14 = v_at(e + 14u * r);
                let a15 = v_at(e + 15u * r);
                take(jj, a0);
                take(jj + 1u, a1);
                take(jj + 2u, a2);
                take(jj + 3u, a3);
                take(jj + 4u, a4);
                take(jj + 5u, a5);
                take(jj + 6u, a6);
                take(jj + 7u, a7);
                take(jj + 8u, a8);
                take(jj + 9u, a9);
                take(jj + 10u, a10);
                take(jj + 11u, a11);
                take(jj + 12u, a12);
                take(jj + 13u, a13);
                take(jj + 14u, a14);
                take(jj + 15u, a15);
            }
            for (; jj < cnt; jj = jj + 1u) {
                take(jj, v_at((k0 + jj) * r + vrow));
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
