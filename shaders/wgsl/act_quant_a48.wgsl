// BitNet a4.8's INT4 absmean activation quantizer (quantize_act_int4), bit-exact with
// tern_reference::quant, optionally fused with the preceding RMSNorm (NORM = 1: y_c = x_c · r ·
// weight_c, the arithmetic of rmsnorm.wgsl / rmsnorm_quant.wgsl, the f32 row not written; NORM = 0:
// y = x, `weight` unused). The TopK-50% + INT8 quantizer is act_quant_topk.wgsl.
//
// β = Σ|y| / n with the sum in the reference's `lane_tree_sum` order (lane l adds l, l + 256, …
// from 0.0; then pairwise, halves 128 … 1), s = div_rn(√7, max(β, 1e-5)),
// q_c = clamp(round_half_even(y_c · s), −8, 7), NaN → 0. Packed 8 per u32: word w holds columns
// 8w .. 8w + 8, column 8w + j (j < 4) in bits 8j .. 8j + 4 and column 8w + 4 + j in bits
// 8j + 4 .. 8j + 8 (so `w & 0x0f0f0f0f` and `(w >> 4) & 0x0f0f0f0f` are the two halves as 4-bit
// two's-complement bytes); zero past n.
//
// Rows of n ≤ YC values are read (and normed) once: y is kept in workgroup memory for the output,
// the same f32 values the re-reads would give. Longer rows re-read x (and the norm weight).
// (Measured on the H100, 2026-11-24 call 2 of h-a48d: this version, 16.1 µs per fused call at
// 2560 columns in a decode profile, beats one holding the row in registers and packing the words
// with workgroup atomics, 18.8 µs.)
//
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32 (NORM = 1);
// q [n_rows][q_stride] u32; s [n_rows] f32 multipliers (x ≈ q / s).

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    q_stride: u32,
}

override NORM: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
const SQRT7_BITS: u32 = 0x402953fdu; // f32 nearest √7 (= 7f32.sqrt())
var<workgroup> partial: array<f32, 256>;
const YC: u32 = 3072u; // the row in workgroup memory up to this many values (12 KiB)
var<workgroup> ybuf: array<f32, 3072>;

fn is_nan_bits(b: u32) -> bool {
    return (b & 0x7fffffffu) > 0x7f800000u;
}

fn val(base: u32, c: u32, r: f32) -> f32 {
    if (NORM == 1u) {
        return x[base + c] * r * weight[c];
    }
    return x[base + c];
}

// y_c: from workgroup memory when the row is cached there (`cached`), else recomputed.
fn yat(base: u32, c: u32, r: f32, cached: bool) -> f32 {
    if (cached) {
        return ybuf[c];
    }
    return val(base, c, r);
}

fn quant(v: f32, s: f32, lo: f32, hi: f32) -> i32 {
    let prod = v * s;
    if (is_nan_bits(bitcast<u32>(prod))) {
        return 0;
    }
    return i32(clamp(round(prod), lo, hi));
}

// partial[0] ← Σ partial (halves 128 … 1); every invocation must call it.
fn tree_sum(lid: u32) {
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            partial[lid] = partial[lid] + partial[lid + st];
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let n = select(0u, p.n, in_range);
    let base = row * p.n;
    // The norm's 1/rms (rmsnorm.wgsl's reduction).
    var r = 1.0;
    if (NORM == 1u) {
        var ss = 0.0;
        for (var c = lid; c < n; c = c + WG) {
            let v = x[base + c];
            ss = ss + v * v;
        }
        partial[lid] = ss;
        tree_sum(lid);
        r = 1.0 / sqrt(partial[0] / f32(p.n) + p.eps);
        workgroupBarrier();
    }

    let cached = n <= YC;
    var sa = 0.0;
    for (var c = lid; c < n; c = c + WG) {
        let yv = val(base, c, r);
        if (cached) {
            ybuf[c] = yv;
        }
        sa = sa + abs(yv);
    }
    partial[lid] = sa;
    tree_sum(lid);
    let beta = div_rn(partial[0], f32(max(p.n, 1u)));
    let s = div_rn(bitcast<f32>(SQRT7_BITS), max(beta, 1e-5));
    if (in_range) {
        if (lid == 0u) {
            s_out[row] = s;
        }
        let qbase = row * p.q_stride;
        for (var w = lid; w < p.q_stride; w = w + WG) {
            var packed = 0u;
            for (var j = 0u; j < 8u; j = j + 1u) {
                let c = 8u * w + j;
                var v = 0i;
                if (c < n) {
                    v = quant(yat(base, c, r, cached), s, -8.0, 7.0);
                }
                let sh = select(8u * (j - 4u) + 4u, 8u * j, j < 4u);
                packed = packed | ((bitcast<u32>(v) & 0xfu) << sh);
            }
            q[qbase + w] = packed;
        }
    }
}
