// RMSNorm fused with BitNet's per-token INT8 absmax quantization of its output: the same
// arithmetic as rmsnorm.wgsl followed by act_quant_int8.wgsl (identical bits to running the two
// kernels), without writing the f32 normalized row: y_c = x_c · r · weight_c with
// r = 1 / sqrt(mean(x²) + eps) (same tree reduction as rmsnorm.wgsl); s = 127 / max(max|y|, 1e-5)
// (div_rn); q_c = clamp(round_half_even(y_c · s), -128, 127), NaN → 0.
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32;
// q [n_rows][q_stride] u32 (4 int8 per word, zero past n); s [n_rows] f32.
//
// Latency (issue 15): a decode step has one row, so one workgroup does the whole pass and its
// time is the chain of dependent memory round trips. The sum of squares issues four independent
// loads per loop trip (scalars, no private array: nothing spills), combined in the same order as
// one load per trip (invocation lid: columns lid, lid + 256, … in increasing order, then the
// 256-way tree), so the bits do not change; the absmax is a tree of u32 maxima (exact, any order)
// instead of 256 atomics on one word.

// #import common
// #import nan_bits
// #import norm_quant_params

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, 256>;
var<workgroup> pmax: array<u32, 256>;

// |y| bits of column c (0 for NaN, which the absmax skips).
fn abs_bits(base: u32, c: u32, r: f32) -> u32 {
    let b = bitcast<u32>(x[base + c] * r * weight[c]) & 0x7fffffffu;
    return select(0u, b, b <= 0x7f800000u);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let base = row * p.n;
    let n = p.n;
    var ss = 0.0;
    if (in_range) {
        var c = lid;
        for (; c + 3u * WG < n; c = c + 4u * WG) {
            let v0 = x[base + c];
            let v1 = x[base + c + WG];
            let v2 = x[base + c + 2u * WG];
            let v3 = x[base + c + 3u * WG];
            ss = ss + v0 * v0;
            ss = ss + v1 * v1;
            ss = ss + v2 * v2;
            ss = ss + v3 * v3;
        }
        for (; c < n; c = c + WG) {
            let v = x[base + c];
            ss = ss + v * v;
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
        var c = lid;
        for (; c + 3u * WG < n; c = c + 4u * WG) {
            let b0 = abs_bits(base, c, r);
            let b1 = abs_bits(base, c + WG, r);
            let b2 = abs_bits(base, c + 2u * WG, r);
            let b3 = abs_bits(base, c + 3u * WG, r);
            m = max(m, max(max(b0, b1), max(b2, b3)));
        }
        for (; c < n; c = c + WG) {
            m = max(m, abs_bits(base, c, r));
        }
    }
    pmax[lid] = m;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            pmax[lid] = max(pmax[lid], pmax[lid + st]);
        }
        workgroupBarrier();
    }
    let s = div_rn(127.0, max(bitcast<f32>(pmax[0]), 1e-5));
    if (in_range) {
        if (lid == 0u) {
            s_out[row] = s;
        }
        let qbase = row * p.q_stride;
        for (var w = lid; w < p.q_stride; w = w + WG) {
            var packed = 0u;
            for (var k = 0u; k < 4u; k = k + 1u) {
                let c = w * 4u + k;
                var v = 0i;
                if (c < n) {
                    let prod = (x[base + c] * r * weight[c]) * s;
                    if (!is_nan_bits(bitcast<u32>(prod))) {
                        v = i32(clamp(round(prod), -128.0, 127.0));
                    }
                }
                packed = packed | ((bitcast<u32>(v) & 0xffu) << (8u * k));
            }
            q[qbase + w] = packed;
        }
    }
}
