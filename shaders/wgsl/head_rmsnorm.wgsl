// Per-head RMSNorm in place (QK-norm: Qwen 3, Gemma 3; tern_reference's rmsnorm over rows of
// head_dim): each head's head_dim values x ← x / sqrt(mean(x²) + eps) · weight, before RoPE.
// The heads of token t start at word t · row_stride + offset, head_dim apart (planar q or k:
// row_stride = n_heads · head_dim, offset 0; the stacked [n][q | k | v] rows of the fused q/k/v
// projection: row_stride = q_dim + 2 · kv_dim, offset 0 for the queries, q_dim for the keys).
// One workgroup per (head, token); the multiplier is rmsnorm.wgsl's (rms_scale.wgsl: its tree
// sum, a different f32 order than the reference's sequential sum: NMSE ~1e-14). Every read of the
// row precedes rms_scale's barriers, so the in-place writes after them are safe.
// Bindings: params; heads (the rows, read-write); weight [head_dim] f32.

// #import common
// #import rms_scale

struct Params {
    head_dim: u32,
    n_heads: u32,
    n_tokens: u32,
    row_stride: u32,
    offset: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> heads: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, 256>;

// Element i of the rows (rms_scale.wgsl reads them through it).
fn x_at(i: u32) -> f32 {
    return heads[i];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let head = wg.x;
    let tok = wg.y;
    let live = head < p.n_heads && tok < p.n_tokens;
    let base = tok * p.row_stride + p.offset + head * p.head_dim;
    let n = p.head_dim;
    let scale = rms_scale(lid, base, n, p.eps, live);
    if (live) {
        for (var c = lid; c < n; c = c + WG) {
            heads[base + c] = heads[base + c] * scale * weight[c];
        }
    }
}
