// Rows scaled and biased in place: x[i] = x[i] · scale + b[i % len] (tern_reference's add_bias,
// and the embedding scale of Gemma, `x *= embed_scale`). `len` = 0: no bias (b is not read), the
// product alone; scale = 1 with a bias: the add alone (x · 1 is exact). One f32 operation each, as
// on the CPU: bit-exact.
// The q/k/v projection biases (Qwen 2) are added to the stacked [n][q | k | v] rows (b = the three
// biases stacked, len = the row) or to the planar q, k, v; the embedding scale to the stream.
// Bindings: params; x [n] f32 (read-write); b [len] f32.

// #import common

struct Params {
    n: u32,
    len: u32,
    scale: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n) {
        return;
    }
    if (p.len == 0u) {
        x[i] = x[i] * p.scale;
    } else if (p.scale == 1.0) {
        x[i] = x[i] + b[i % p.len];
    } else {
        let s = x[i] * p.scale;
        x[i] = s + b[i % p.len];
    }
}
