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
// Latency (decode: one row, one workgroup; branch h-a48q). Rows of n ≤ 3072 values: every
// invocation issues its (up to) 12 loads of x and of the norm weight at once, into scalars (the
// NVIDIA driver keeps private arrays in memory: h-cat's measurement), so the row costs one memory
// round trip instead of one per column strip; the sums add the same terms in the same order
// (columns lid, lid + 256, … from 0.0; out-of-range strips add +0.0, which changes no sum); y is
// kept in workgroup memory for the packing. Each 256-way tree sum takes two barriers instead of
// eight (tree_sum: 32 invocations add their 8-leaf subtrees — the halves 128, 64, 32 — then every
// invocation adds the 32 partial sums in the halves 16 … 1): the same additions in the same
// order, so the same bits. Longer rows loop over x (re-reading it and the norm weight).
//
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32 (NORM = 1);
// q [n_rows][q_stride] u32; s [n_rows] f32 multipliers (x ≈ q / s).

// #import common
// #import nan_bits
// #import act_round
// #import ordered_sum
// #import tree_sum256
// #import norm_quant_params
// #import norm_quant_row

override NORM: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
const SQRT7_BITS: u32 = 0x402953fdu; // f32 nearest √7 (= 7f32.sqrt())
const YC: u32 = 3072u; // rows up to this many values: loaded at once, y in workgroup memory
var<workgroup> red: array<f32, 256>;
var<workgroup> red32: array<f32, 32>;
var<workgroup> ybuf: array<f32, 3072>;


// Rows of n ≤ YC values (see the header). `n` is 0 for a row past n_rows (nothing is written).
fn fast_row(lid: u32, row: u32, n: u32, in_range: bool) {
    let base = row * p.n;
    let x0 = ldx(base, lid + 0u * WG, n);
    let x1 = ldx(base, lid + 1u * WG, n);
    let x2 = ldx(base, lid + 2u * WG, n);
    let x3 = ldx(base, lid + 3u * WG, n);
    let x4 = ldx(base, lid + 4u * WG, n);
    let x5 = ldx(base, lid + 5u * WG, n);
    let x6 = ldx(base, lid + 6u * WG, n);
    let x7 = ldx(base, lid + 7u * WG, n);
    let x8 = ldx(base, lid + 8u * WG, n);
    let x9 = ldx(base, lid + 9u * WG, n);
    let x10 = ldx(base, lid + 10u * WG, n);
    let x11 = ldx(base, lid + 11u * WG, n);
    let w0 = ldw(lid + 0u * WG, n);
    let w1 = ldw(lid + 1u * WG, n);
    let w2 = ldw(lid + 2u * WG, n);
    let w3 = ldw(lid + 3u * WG, n);
    let w4 = ldw(lid + 4u * WG, n);
    let w5 = ldw(lid + 5u * WG, n);
    let w6 = ldw(lid + 6u * WG, n);
    let w7 = ldw(lid + 7u * WG, n);
    let w8 = ldw(lid + 8u * WG, n);
    let w9 = ldw(lid + 9u * WG, n);
    let w10 = ldw(lid + 10u * WG, n);
    let w11 = ldw(lid + 11u * WG, n);
    var r = 1.0;
    if (NORM == 1u) {
        // rmsnorm.wgsl's sum of squares (past the row: + 0 · 0)
        var ss = 0.0;
        ss = ad(ss, x0 * x0);
        ss = ad(ss, x1 * x1);
        ss = ad(ss, x2 * x2);
        ss = ad(ss, x3 * x3);
        ss = ad(ss, x4 * x4);
        ss = ad(ss, x5 * x5);
        ss = ad(ss, x6 * x6);
        ss = ad(ss, x7 * x7);
        ss = ad(ss, x8 * x8);
        ss = ad(ss, x9 * x9);
        ss = ad(ss, x10 * x10);
        ss = ad(ss, x11 * x11);
        r = 1.0 / sqrt(tree_sum(lid, ss) / f32(p.n) + p.eps);
    }
    let y0 = yof(x0, r, w0);
    let y1 = yof(x1, r, w1);
    let y2 = yof(x2, r, w2);
    let y3 = yof(x3, r, w3);
    let y4 = yof(x4, r, w4);
    let y5 = yof(x5, r, w5);
    let y6 = yof(x6, r, w6);
    let y7 = yof(x7, r, w7);
    let y8 = yof(x8, r, w8);
    let y9 = yof(x9, r, w9);
    let y10 = yof(x10, r, w10);
    let y11 = yof(x11, r, w11);
    var sa = 0.0;
    if (lid + 0u * WG < n) {
        ybuf[lid + 0u * WG] = y0;
        sa = ad(sa, abs(y0));
    }
    if (lid + 1u * WG < n) {
        ybuf[lid + 1u * WG] = y1;
        sa = ad(sa, abs(y1));
    }
    if (lid + 2u * WG < n) {
        ybuf[lid + 2u * WG] = y2;
        sa = ad(sa, abs(y2));
    }
    if (lid + 3u * WG < n) {
        ybuf[lid + 3u * WG] = y3;
        sa = ad(sa, abs(y3));
    }
    if (lid + 4u * WG < n) {
        ybuf[lid + 4u * WG] = y4;
        sa = ad(sa, abs(y4));
    }
    if (lid + 5u * WG < n) {
        ybuf[lid + 5u * WG] = y5;
        sa = ad(sa, abs(y5));
    }
    if (lid + 6u * WG < n) {
        ybuf[lid + 6u * WG] = y6;
        sa = ad(sa, abs(y6));
    }
    if (lid + 7u * WG < n) {
        ybuf[lid + 7u * WG] = y7;
        sa = ad(sa, abs(y7));
    }
    if (lid + 8u * WG < n) {
        ybuf[lid + 8u * WG] = y8;
        sa = ad(sa, abs(y8));
    }
    if (lid + 9u * WG < n) {
        ybuf[lid + 9u * WG] = y9;
        sa = ad(sa, abs(y9));
    }
    if (lid + 10u * WG < n) {
        ybuf[lid + 10u * WG] = y10;
        sa = ad(sa, abs(y10));
    }
    if (lid + 11u * WG < n) {
        ybuf[lid + 11u * WG] = y11;
        sa = ad(sa, abs(y11));
    }
    let beta = div_rn(tree_sum(lid, sa), f32(max(p.n, 1u)));
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
                    v = quant(ybuf[c], s, -8.0, 7.0);
                }
                let sh = select(8u * (j - 4u) + 4u, 8u * j, j < 4u);
                packed = packed | ((bitcast<u32>(v) & 0xfu) << sh);
            }
            q[qbase + w] = packed;
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    zb = p.n >> 31u;
    let row = wg.x;
    let in_range = row < p.n_rows;
    let n = select(0u, p.n, in_range);
    if (p.n <= YC) {
        fast_row(lid, row, n, in_range);
        return;
    }
    // Long rows: loops over x (the norm's 1/rms in rmsnorm.wgsl's order, then Σ|y|).
    let base = row * p.n;
    var r = 1.0;
    if (NORM == 1u) {
        var ss = 0.0;
        for (var c = lid; c < n; c = c + WG) {
            let v = x[base + c];
            ss = ss + v * v;
        }
        r = 1.0 / sqrt(tree_sum(lid, ss) / f32(p.n) + p.eps);
    }
    var sa = 0.0;
    for (var c = lid; c < n; c = c + WG) {
        sa = sa + abs(val(base, c, r));
    }
    let beta = div_rn(tree_sum(lid, sa), f32(max(p.n, 1u)));
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
                    v = quant(val(base, c, r), s, -8.0, 7.0);
                }
                let sh = select(8u * (j - 4u) + 4u, 8u * j, j < 4u);
                packed = packed | ((bitcast<u32>(v) & 0xfu) << sh);
            }
            q[qbase + w] = packed;
        }
    }
}
