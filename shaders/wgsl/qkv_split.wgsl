// The rows of the concatenated q/k/v GEMV/GEMM, qkv [n][q_dim + 2·kv_dim], split into the
// planar q [n][q_dim], k [n][kv_dim], v [n][kv_dim] that RoPE, the KV store and attention read
// (batches of several tokens, KIVI and MiniCache caches: the paths rope_kv.wgsl does not take).
// A copy: the values are the bits of three separate projections.

// #import common

struct Params {
    n_tokens: u32,
    q_dim: u32,
    kv_dim: u32,
    stride: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
@group(0) @binding(3) var<storage, read_write> k: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;
    if (idx >= p.n_tokens * p.stride) {
        return;
    }
    let t = idx / p.stride;
    let c = idx % p.stride;
    let x = src[idx];
    if (c < p.q_dim) {
        q[t * p.q_dim + c] = x;
    } else if (c < p.q_dim + p.kv_dim) {
        k[t * p.kv_dim + c - p.q_dim] = x;
    } else {
        v[t * p.kv_dim + c - p.q_dim - p.kv_dim] = x;
    }
}
