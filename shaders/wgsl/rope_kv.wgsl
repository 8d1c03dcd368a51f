// RoPE of the queries and keys fused with the KV store of the keys and values (issues 15, 14):
// one dispatch per layer instead of rope(q), rope(k), kv_store(K), kv_store(V), for every cache
// format of a layer of its own (f32, f16, q8, KIVI q4/q3/q2, absmax a4/a3). The batch's
// projections are one buffer `qkv`, row t (`stride` words) = [q: n_head·head_dim |
// k: n_head_kv·head_dim | v: n_head_kv·head_dim] (the output of the concatenated q/k/v GEMV; one
// token: the planar [q | k | v]).
//
// Invocations (256 per workgroup, 2-D grid as kv_store.wgsl):
//   [0, n·n_head·half)         q pair (t, h, j): rotated in place, rope.wgsl's exact operations;
//   [.., + store_count(keys))  the keys' store: kv_store.wgsl's stages (kv_quant.wgsl, imported
//                              to this file), reading each key value rotated here (rope.wgsl's
//                              operations on the unrotated k, which nothing writes);
//   [.., + store_count(vals))  the values' store likewise.
// The rotated formats (q4r, q3r, q2r) take PASS 2 instead: the query pairs, then a workgroup per
// (token, unit of kv heads) for the keys, then for the values (kv_quant.wgsl's stage_rot: each
// head rotated by H, then quantized per head; the queries are rotated by attention.wgsl).
// Whole-row formats run stage 0 (any batch); KIVI runs the one-token step (the blocks that fill,
// from the ring and this token, then the window row: the launcher takes one token only). So the
// cache words and the rotated queries are the bits of the separate kernels (the same code, the
// same f32 operations in the same order). Positions past n_ctx are skipped (the host checks
// first). The key and the value stores touch different buffers, the q rotation only q's words.
//
// Overrides: NEOX (0: pairs (2i, 2i+1), 1: pairs (i, i + rope_dim/2)); FMT (kv_store.wgsl's).
// Bindings (4 storage): qkv (queries rotated in place), cs [n][rope_dim/2] (cos, sin), the
// layer's key cache, its value cache; uniforms: the RoPE shape, the step, the cache's Geom.

// #import common
// #import kv_quant
// #import kv_step
// #import kv_formats

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    rope_dim: u32,
    n_tokens: u32,
    stride: u32,
    n_ctx: u32,
    wpr: u32,
}

override NEOX: u32 = 0u;
// 2: the rotated formats' only pass (above). 1: the absmax formats' scales pass (kv_quant.wgsl's stage_scales), one dispatch before the
// fused one (PASS 0): scales_groups() workgroups for the keys (their values rotated here), then
// as many for the values.
override PASS: u32 = 0u;

@group(0) @binding(0) var<uniform> rp: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;
@group(0) @binding(6) var<uniform> g: Geom;

// which cache this invocation stores (set once in main)
var<private> storing_keys: bool;

// Indices of pair j of the head at qkv[base] (rope.wgsl's pairing).
fn pair_of(base: u32, j: u32) -> vec2<u32> {
    if (NEOX == 1u) {
        return vec2<u32>(base + j, base + j + rp.rope_dim / 2u);
    }
    return vec2<u32>(base + 2u * j, base + 2u * j + 1u);
}

// Value i of the key head at qkv[base] after RoPE at token t (rope.wgsl's operations).
fn key_at(base: u32, i: u32, t: u32) -> f32 {
    if (i >= rp.rope_dim) {
        return qkv[base + i];
    }
    let half = rp.rope_dim / 2u;
    var j = i / 2u;
    var second = (i & 1u) == 1u;
    if (NEOX == 1u) {
        second = i >= half;
        j = select(i, i - half, second);
    }
    let ix = pair_of(base, j);
    let c = cs[t * half + j];
    let a = qkv[ix.x];
    let b = qkv[ix.y];
    if (second) {
        return a * c.y + b * c.x;
    }
    return a * c.x - b * c.y;
}

// The accessors of kv_quant.wgsl: value c of the row (key or value) of token t, keys rotated.
fn src_at(t: u32, c: u32) -> f32 {
    let kv = rp.n_head_kv * rp.head_dim;
    let q_dim = rp.n_head * rp.head_dim;
    if (storing_keys) {
        let h = c / rp.head_dim;
        return key_at(t * rp.stride + q_dim + h * rp.head_dim, c % rp.head_dim, t);
    }
    return qkv[t * rp.stride + q_dim + kv + c];
}

fn cache_ld(i: u32) -> u32 {
    if (storing_keys) {
        return kc[i];
    }
    return vc[i];
}

fn cache_st(i: u32, w: u32) {
    if (storing_keys) {
        kc[i] = w;
    } else {
        vc[i] = w;
    }
}

fn is_key() -> bool {
    return storing_keys;
}

// Query pair idx (< nq) rotated in place (rope.wgsl's operations).
fn rope_q(idx: u32, nq: u32) {
    if (idx >= nq) {
        return;
    }
    let half = rp.rope_dim / 2u;
    let t = idx / (rp.n_head * half);
    let r = idx % (rp.n_head * half);
    let ix = pair_of(t * rp.stride + (r / half) * rp.head_dim, r % half);
    let c = cs[t * half + r % half];
    let a = qkv[ix.x];
    let b = qkv[ix.y];
    qkv[ix.x] = a * c.x - b * c.y;
    qkv[ix.y] = a * c.y + b * c.x;
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
) {
    if (PASS == 1u) {
        let wid = wg.x + wg.y * nwg.x;
        let nk = scales_groups();
        storing_keys = wid < nk;
        stage_scales(lid, select(wid - nk, wid, storing_keys));
        return;
    }
    var idx = gid.x + gid.y * nwg.x * 256u;
    let half = rp.rope_dim / 2u;
    let nq = rp.n_tokens * rp.n_head * half;
    if (PASS == 2u) {
        // the rotated formats: the query pairs' workgroups, then a workgroup per (token, unit of
        // kv heads) for the keys (rotated here, then by stage_rot), then for the values
        let wid = wg.x + wg.y * nwg.x;
        let nqw = (nq + 255u) / 256u;
        if (wid < nqw) {
            rope_q(wid * 256u + lid, nq);
            return;
        }
        let units = rp.n_tokens * rot_units();
        let w = wid - nqw;
        storing_keys = w < units;
        stage_rot(lid, select(w - units, w, storing_keys));
        return;
    }
    if (idx < nq) {
        rope_q(idx, nq);
        return;
    }
    idx = idx - nq;
    let nk = store_count(true);
    storing_keys = idx < nk;
    if (storing_keys) {
        store_at(idx, true);
        return;
    }
    idx = idx - nk;
    if (idx < store_count(false)) {
        store_at(idx, false);
    }
}
