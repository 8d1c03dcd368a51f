// KV-cache store: cache[(p0 + t) · row + i] = src[t · row + i] for the batch's tokens t, where p0
// (tokens already cached) comes from the step buffer the host rewrites before each submit, so one
// recorded plan serves every position. Rows past n_ctx are skipped (the host checks first).
// Bindings: params; step; src [n_tokens][row] f32; cache [n_ctx][row] f32.

struct Params {
    row: u32,
    n_tokens: u32,
    n_ctx: u32,
    _pad: u32,
}

struct Step {
    p0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;
    if (idx >= p.row * p.n_tokens) {
        return;
    }
    let t = idx / p.row;
    let i = idx % p.row;
    let pos = step.p0 + t;
    if (pos >= p.n_ctx) {
        return;
    }
    cache[pos * p.row + i] = src[idx];
}
