// Activation sparsity counters (measurement only; `tern bench` records it in a separate pass):
// for each of n_tokens rows of quantized activations (INT8: 4 per u32, INT4: 8 per u32 as
// act_quant_a48.wgsl packs them), count the zero codes among the first `cols` and add
// (zeros, cols) to stats[2·slot], stats[2·slot + 1].
//
// One workgroup per token. Bindings: q [n_tokens][stride] u32; stats [8] atomic u32.

// #import common

struct Params {
    cols: u32,
    stride: u32,
    n_tokens: u32,
    slot: u32,
    int4: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> stats: array<atomic<u32>>;

const WG: u32 = 256u;
var<workgroup> zeros: atomic<u32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let tok = wg.x;
    if (lid == 0u) {
        atomicStore(&zeros, 0u);
    }
    workgroupBarrier();
    var z = 0u;
    if (tok < p.n_tokens) {
        let base = tok * p.stride;
        for (var c = lid; c < p.cols; c = c + WG) {
            var code = 0u;
            if (p.int4 == 1u) {
                let j = c & 7u;
                let sh = select(8u * (j - 4u) + 4u, 8u * j, j < 4u);
                code = (q[base + (c >> 3u)] >> sh) & 0xfu;
            } else {
                code = (q[base + (c >> 2u)] >> (8u * (c & 3u))) & 0xffu;
            }
            z = z + select(0u, 1u, code == 0u);
        }
    }
    atomicAdd(&zeros, z);
    workgroupBarrier();
    if (lid == 0u && tok < p.n_tokens) {
        atomicAdd(&stats[2u * p.slot], atomicLoad(&zeros));
        atomicAdd(&stats[2u * p.slot + 1u], p.cols);
    }
}
