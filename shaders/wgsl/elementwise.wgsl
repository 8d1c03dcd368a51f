// Elementwise ops (tern_reference::{swiglu, relu2_glu, geglu} and the residual add):
//   OP 0 = SwiGLU   out = silu(a) · b = a / (1 + e^−a) · b   (exp differs from the CPU's in the last
//                   bits: NMSE ~1e-14)
//   OP 1 = ReLU²GLU out = relu(a)² · b                       (exact but for FMA contraction)
//   OP 2 = add      out = a + b                              (exact)
//   OP 3 = GeGLU    out = gelu_tanh(a) · b (tern_reference::geglu: 0.5·a·(1 + tanh(√(2/π)·a·(1 +
//                   0.044715·a²))); tanh as (1 − e^−2|u|) / (1 + e^−2|u|) with the sign of u, which
//                   never overflows (tanh differs from the CPU's in the last bits)
// Bindings: a, b, out: [n] f32.
// `p.pairs` = 1 (the GLUs): a holds gate/up pairs, [n][2] (a GEMM over gate/up rows interleaved at
// load, model/load.rs): g = a[2i], u = a[2i + 1], b is not read.

// #import common

struct Params {
    n: u32,
    pairs: u32,
    _pad1: u32,
    _pad2: u32,
}

override OP: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// Gemma's gelu_pytorch_tanh (tern_reference::kernels::gelu_tanh).
fn gelu_tanh(x: f32) -> f32 {
    let u = 0.7978846 * x * (1.0 + 0.044715 * x * x);
    let e = exp(-2.0 * abs(u));
    let t = sign(u) * (1.0 - e) / (1.0 + e);
    return 0.5 * x * (1.0 + t);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n) {
        return;
    }
    var g = 0.0;
    var u = 0.0;
    if (p.pairs == 1u) {
        g = a[2u * i];
        u = a[2u * i + 1u];
    } else {
        g = a[i];
        u = b[i];
    }
    if (OP == 0u) {
        out[i] = g / (1.0 + exp(-g)) * u;
    } else if (OP == 1u) {
        let r = max(g, 0.0);
        out[i] = r * r * u;
    } else if (OP == 3u) {
        out[i] = gelu_tanh(g) * u;
    } else {
        out[i] = g + u;
    }
}
