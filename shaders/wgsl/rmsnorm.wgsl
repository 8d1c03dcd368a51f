// RMSNorm over rows: out = x / sqrt(mean(x²) + eps) · weight (tern_reference::rmsnorm).
// One workgroup per row; the sum of squares is a tree reduction (a different f32 order than the
// reference's sequential sum: NMSE ~1e-14).
// Bindings: x [n_rows][n] f32; weight [n] f32; out [n_rows][n] f32.
//
// The sum of squares and the multiplier: rms_scale.wgsl (imported; shared with ggml_gemv.wgsl's
// fused norm prologue, which must compute the same bits).

// #import common
// #import rms_scale

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, 256>;

// Element i of x (rms_scale.wgsl, imported, reads the row through it).
fn x_at(i: u32) -> f32 {
    return x[i];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let base = row * p.n;
    let n = p.n;
    let scale = rms_scale(lid, base, n, p.eps, in_range);
    if (in_range) {
        for (var c = lid; c < n; c = c + WG) {
            out[base + c] = x[base + c] * scale * weight[c];
        }
    }
}
