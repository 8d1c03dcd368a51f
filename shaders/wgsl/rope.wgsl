// Rotary position embedding in place (tern_reference::rope). The cos/sin of every (token, pair)
// come from the host, computed in f64 and rounded to f32 exactly as the reference does, so the
// kernel only rotates: (a, b) → (a·cos − b·sin, a·sin + b·cos). Bit-exact with the reference
// where the driver does not contract the products into FMAs.
//
// Override NEOX: 0 = pairs (2i, 2i+1) (GPT-J / llama.cpp normal), 1 = pairs (i, i + rope_dim/2).
// Bindings: x [n_tokens][n_heads][head_dim] f32 (in place); cs [n_tokens][rope_dim/2] vec2 (cos, sin).

// #import common

struct Params {
    n_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    n_tokens: u32,
}

override NEOX: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> cs: array<vec2<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half = p.rope_dim / 2u;
    let i = gid.x; // pair index
    let h = gid.y; // head
    let t = gid.z; // token
    if (i >= half || h >= p.n_heads || t >= p.n_tokens) {
        return;
    }
    let base = (t * p.n_heads + h) * p.head_dim;
    var i0 = base + 2u * i;
    var i1 = i0 + 1u;
    if (NEOX == 1u) {
        i0 = base + i;
        i1 = base + i + half;
    }
    let c = cs[t * half + i];
    let a = x[i0];
    let b = x[i1];
    x[i0] = a * c.x - b * c.y;
    x[i1] = a * c.y + b * c.x;
}
