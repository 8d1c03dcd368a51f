// RoPE of the queries and keys fused with the KV store of the keys and values (issue 15): one
// dispatch per layer instead of rope(q), rope(k), kv_store(K), kv_store(V), for the whole-row
// float formats (f32, f16). The batch's projections are one buffer `qkv`, row t (`stride` words)
// = [q: n_head·head_dim | k: n_head_kv·head_dim | v: n_head_kv·head_dim] (the output of the
// concatenated q/k/v GEMV; one token: the planar [q | k | v]).
//
// Invocations (256 per workgroup, 2-D grid as kv_store.wgsl):
//   [0, n·n_head·half)         q pair (t, h, j): rotated in place, rope.wgsl's exact operations;
//   [.., + n·wpr)              key word (t, w) of position p0 + t: its values rotated here
//                              (rope.wgsl's operations on the unrotated k, which nothing writes)
//                              and stored as kv_store.wgsl's stage 0 stores them;
//   [.., + n·wpr)              value word (t, w), stored likewise.
// So the cache words and the rotated queries are the bits of the separate kernels (same f32
// operations in the same order). Positions past n_ctx are skipped (the host checks first).
//
// Overrides: NEOX (0: pairs (2i, 2i+1), 1: pairs (i, i + rope_dim/2)); FMT (0 f32, 1 f16: the
// FMT of kv_store.wgsl). Bindings (4 storage): qkv (queries rotated in place), cs [n][rope_dim/2]
// (cos, sin), the layer's key cache, its value cache.

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

struct Step {
    p0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

override NEOX: u32 = 0u;
override FMT: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;

// kv_store.wgsl's f16 of a stored value: f16 bits saturated to ±65504
fn f16_sat(x: f32) -> u32 {
    return f32_to_f16_bits(clamp(x, -65504.0, 65504.0));
}

// Indices of pair j of the head at qkv[base] (rope.wgsl's pairing).
fn pair_of(base: u32, j: u32) -> vec2<u32> {
    if (NEOX == 1u) {
        return vec2<u32>(base + j, base + j + p.rope_dim / 2u);
    }
    return vec2<u32>(base + 2u * j, base + 2u * j + 1u);
}

// Value i of the key head at qkv[base] after RoPE at token t (rope.wgsl's operations).
fn key_at(base: u32, i: u32, t: u32) -> f32 {
    if (i >= p.rope_dim) {
        return qkv[base + i];
    }
    let half = p.rope_dim / 2u;
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

// Value c of the row (key or value) of token t, keys rotated.
fn row_at(t: u32, c: u32, key: bool) -> f32 {
    let kv = p.n_head_kv * p.head_dim;
    let q_dim = p.n_head * p.head_dim;
    if (key) {
        let h = c / p.head_dim;
        return key_at(t * p.stride + q_dim + h * p.head_dim, c % p.head_dim, t);
    }
    return qkv[t * p.stride + q_dim + kv + c];
}

fn word_of(t: u32, w: u32, key: bool) -> u32 {
    if (FMT == 0u) {
        return bitcast<u32>(row_at(t, w, key));
    }
    let lo = f16_sat(row_at(t, 2u * w, key));
    let hi = f16_sat(row_at(t, 2u * w + 1u, key));
    return lo | (hi << 16u);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    var idx = gid.x + gid.y * nwg.x * 256u;
    let half = p.rope_dim / 2u;
    let nq = p.n_tokens * p.n_head * half;
    if (idx < nq) {
        let t = idx / (p.n_head * half);
        let r = idx % (p.n_head * half);
        let ix = pair_of(t * p.stride + (r / half) * p.head_dim, r % half);
        let c = cs[t * half + r % half];
        let a = qkv[ix.x];
        let b = qkv[ix.y];
        qkv[ix.x] = a * c.x - b * c.y;
        qkv[ix.y] = a * c.y + b * c.x;
        return;
    }
    idx = idx - nq;
    let nw = p.n_tokens * p.wpr;
    if (idx >= 2u * nw) {
        return;
    }
    let key = idx < nw;
    let i = select(idx - nw, idx, key);
    let t = i / p.wpr;
    let w = i % p.wpr;
    let pos = step.p0 + t;
    if (pos >= p.n_ctx) {
        return;
    }
    let word = word_of(t, w, key);
    if (key) {
        kc[pos * p.wpr + w] = word;
    } else {
        vc[pos * p.wpr + w] = word;
    }
}
