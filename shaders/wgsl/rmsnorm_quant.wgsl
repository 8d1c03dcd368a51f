// RMSNorm fused with BitNet's per-token INT8 absmax quantization of its output: the same
// arithmetic as rmsnorm.wgsl followed by act_quant_int8.wgsl (identical bits to running the two
// kernels), without writing the f32 normalized row: y_c = x_c · r · weight_c with
// r = 1 / sqrt(mean(x²) + eps) (same tree reduction as rmsnorm.wgsl); s = 127 / max(max|y|, 1e-5)
// (div_rn); q_c = clamp(round_half_even(y_c · s), -128, 127), NaN → 0.
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32;
// q [n_rows][q_stride] u32 (4 int8 per word, zero past n); s [n_rows] f32.
//
// Latency (issue 15): a decode step has one row, so one workgroup does the whole pass and its
// time is the chain of dependent memory round trips, not bandwidth. Each pass therefore issues
// UNROLL independent loads per invocation before using any of them (constant-bound inner loops,
// unrolled by the compiler), instead of one load per loop trip: the same values are combined in
// the same order (invocation lid sums columns lid, lid + 256, … in increasing order; then the
// 256-way tree), so the bits do not change.

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    q_stride: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
// Independent loads in flight per invocation and pass.
const UNROLL: u32 = 8u;
// Output words per invocation and trip of the packing pass (4 columns each).
const WUNROLL: u32 = 4u;
var<workgroup> partial: array<f32, 256>;
var<workgroup> amax_bits: atomic<u32>;
var<workgroup> qscale: f32;

fn is_nan_bits(b: u32) -> bool {
    return (b & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let base = row * p.n;
    let n = p.n;
    if (lid == 0u) {
        atomicStore(&amax_bits, 0u);
    }
    var ss = 0.0;
    if (in_range) {
        for (var c0 = lid; c0 < n; c0 = c0 + UNROLL * WG) {
            var xv: array<f32, UNROLL>;
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                let c = c0 + k * WG;
                xv[k] = 0.0;
                if (c < n) {
                    xv[k] = x[base + c];
                }
            }
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                if (c0 + k * WG < n) {
                    let v = xv[k];
                    ss = ss + v * v;
                }
            }
        }
    }
    partial[lid] = ss;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            partial[lid] = partial[lid] + partial[lid + st];
        }
        workgroupBarrier();
    }
    let r = 1.0 / sqrt(partial[0] / f32(n) + p.eps);
    var m = 0u;
    if (in_range) {
        for (var c0 = lid; c0 < n; c0 = c0 + UNROLL * WG) {
            var xv: array<f32, UNROLL>;
            var wv: array<f32, UNROLL>;
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                let c = c0 + k * WG;
                xv[k] = 0.0;
                wv[k] = 0.0;
                if (c < n) {
                    xv[k] = x[base + c];
                    wv[k] = weight[c];
                }
            }
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                if (c0 + k * WG < n) {
                    let b = bitcast<u32>(xv[k] * r * wv[k]) & 0x7fffffffu;
                    if (b <= 0x7f800000u) {
                        m = max(m, b);
                    }
                }
            }
        }
    }
    atomicMax(&amax_bits, m);
    workgroupBarrier();
    if (lid == 0u) {
        let amax = bitcast<f32>(atomicLoad(&amax_bits));
        qscale = div_rn(127.0, max(amax, 1e-5));
        if (in_range) {
            s_out[row] = qscale;
        }
    }
    workgroupBarrier();
    let s = qscale;
    if (in_range) {
        let qbase = row * p.q_stride;
        for (var w0 = lid; w0 < p.q_stride; w0 = w0 + WUNROLL * WG) {
            var xv: array<f32, 16>; // 4 · WUNROLL
            var wv: array<f32, 16>;
            for (var i = 0u; i < 4u * WUNROLL; i = i + 1u) {
                let c = (w0 + (i / 4u) * WG) * 4u + (i % 4u);
                xv[i] = 0.0;
                wv[i] = 0.0;
                if (c < n) {
                    xv[i] = x[base + c];
                    wv[i] = weight[c];
                }
            }
            for (var j = 0u; j < WUNROLL; j = j + 1u) {
                let wd = w0 + j * WG;
                if (wd < p.q_stride) {
                    var packed = 0u;
                    for (var k = 0u; k < 4u; k = k + 1u) {
                        let c = wd * 4u + k;
                        var v = 0i;
                        if (c < n) {
                            let prod = (xv[4u * j + k] * r * wv[4u * j + k]) * s;
                            if (!is_nan_bits(bitcast<u32>(prod))) {
                                v = i32(clamp(round(prod), -128.0, 127.0));
                            }
                        }
                        packed = packed | ((bitcast<u32>(v) & 0xffu) << (8u * k));
                    }
                    q[qbase + wd] = packed;
                }
            }
        }
    }
}
