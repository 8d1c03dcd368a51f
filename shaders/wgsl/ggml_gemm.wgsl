// Tiled ggml-block GEMM with f32 activations (prefill): y[t][r] = Σ_c dequant(W)[r][c] · x[t][c]
// for Q8_0, Q4_0, Q4_1 and Q6_K rows kept exactly as llama.cpp stores them
// (runtime/format/src/ggml.rs; see ggml_gemv.wgsl for the byte layouts and `load32`).
//
// One workgroup computes a tile of TR = 64 rows × TT = 32 tokens. Per K step of 32 columns (one
// Q8_0/Q4_0/Q4_1 block, one eighth of a Q6_K super-block) it dequantizes its rows' block into f32
// in workgroup memory (8 values per invocation, the same f32 operations as ggml: Q8_0 q·d,
// Q4_0 (q − 8)·d, Q4_1 q·d + m, Q6_K (d·sc)·q), stages the 32 columns of its tokens next to them,
// and each invocation accumulates a 4-row × 2-token micro-tile from vec4 loads. Each weight block
// is read once per 32 tokens instead of once per token. f32 sums in another order than the
// reference's `dot_f32`: NMSE against it ~1e-14.
//
// Override constant: QTYPE 0 = Q8_0, 1 = Q4_0, 2 = Q4_1, 3 = Q6_K, 4..10 = Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, IQ4_NL (dequantized by ggml_kquants.wgsl's kq4, bit-exact with the CPU).
// Bindings: w [rows_part] rows of blocks (bytes; a row is blocks_per_row 32-column units);
//           x [n_tokens][cols / 4] vec4<f32>; y [n_tokens][out_stride] f32, this part writes
//           columns row0 .. row0 + rows.
// Grid: x = row tiles of the part, y = token tiles.

// #import common
// #import byte_load
// #import ggml_common
// #import ggml_kquants

override QTYPE: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
const TR: u32 = 64u;
const TT: u32 = 32u;

// Dequantized weights [k/4][row] and activations [k/4][token] of one 32-column step: 8 + 4 KiB.
var<workgroup> wt: array<vec4<f32>, 512>; // 8 · TR
var<workgroup> xt: array<vec4<f32>, 256>; // 8 · TT

// Bytes of one row of blocks.
fn row_bytes() -> u32 {
    if (QTYPE == 3u) {
        return p.blocks_per_row / 8u * 210u;
    }
    if (QTYPE >= 4u) {
        return kq_row_bytes(QTYPE, p.blocks_per_row);
    }
    if (QTYPE == 0u) {
        return p.blocks_per_row * 34u;
    }
    if (QTYPE == 1u) {
        return p.blocks_per_row * 18u;
    }
    return p.blocks_per_row * 20u;
}

// Q8_0: the 4 int8 of qw times d.
fn q8x4(qw: u32, d: f32) -> vec4<f32> {
    let q = bitcast<i32>(qw);
    return vec4<f32>(
        f32(extractBits(q, 0u, 8u)) * d,
        f32(extractBits(q, 8u, 8u)) * d,
        f32(extractBits(q, 16u, 8u)) * d,
        f32(extractBits(q, 24u, 8u)) * d
    );
}

// Q4_0 / Q4_1: the nibbles at bit sh of the 4 bytes of qw.
fn q4x4(qw: u32, sh: u32, d: f32, m: f32) -> vec4<f32> {
    let q = vec4<f32>(
        f32((qw >> sh) & 0xfu),
        f32((qw >> (8u + sh)) & 0xfu),
        f32((qw >> (16u + sh)) & 0xfu),
        f32((qw >> (24u + sh)) & 0xfu)
    );
    if (QTYPE == 1u) {
        return (q - 8.0) * d;
    }
    return q * d + m;
}

// Q6_K: 4 elements from ql word qlw (low or high nibbles), qh word qhw (bits 2·qd), (d·sc).
fn q6x4(qlw: u32, qhw: u32, qd: u32, dsc: f32) -> vec4<f32> {
    let sh = select(0u, 4u, qd >= 2u);
    var q: vec4<f32>;
    q.x = f32(i32(((qlw >> sh) & 0xfu) | (((qhw >> (2u * qd)) & 3u) << 4u)) - 32);
    q.y = f32(i32(((qlw >> (8u + sh)) & 0xfu) | (((qhw >> (8u + 2u * qd)) & 3u) << 4u)) - 32);
    q.z = f32(i32(((qlw >> (16u + sh)) & 0xfu) | (((qhw >> (16u + 2u * qd)) & 3u) << 4u)) - 32);
    q.w = f32(i32(((qlw >> (24u + sh)) & 0xfu) | (((qhw >> (24u + 2u * qd)) & 3u) << 4u)) - 32);
    return dsc * q;
}

// Elements h·8 .. h·8 + 8 of 32-column unit `u` of the row starting at byte `rb`, as two vec4s.
struct Eight {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn dequant8(rb: u32, u: u32, h: u32) -> Eight {
    if (QTYPE >= 4u) {
        let c = u * 32u + 8u * h;
        return Eight(kq4(QTYPE, rb, c), kq4(QTYPE, rb, c + 4u));
    }
    if (QTYPE == 0u) {
        let off = rb + u * 34u;
        let d = f16_at(off);
        let qo = off + 2u + 8u * h;
        return Eight(q8x4(load32(qo), d), q8x4(load32(qo + 4u), d));
    }
    if (QTYPE == 3u) {
        // Q6_K: unit u is quarter qd of half hf of super-block u / 8 (dequantize_row_q6_K).
        let off = rb + (u / 8u) * 210u;
        let kc = u % 8u;
        let hf = kc / 4u;
        let qd = kc % 4u;
        let l0 = 8u * h;
        let d = f16_at(off + 208u);
        let scb = load32(off + 192u + hf * 8u + l0 / 16u + 2u * qd) & 0xffu;
        let dsc = d * f32(extractBits(bitcast<i32>(scb), 0u, 8u));
        let ql = off + hf * 64u + (qd & 1u) * 32u + l0;
        let qh = off + 128u + hf * 32u + l0;
        return Eight(
            q6x4(load32(ql), load32(qh), qd, dsc),
            q6x4(load32(ql + 4u), load32(qh + 4u), qd, dsc)
        );
    }
    // Q4_0 / Q4_1: byte j of qs holds element j (low nibble) and j + 16 (high nibble).
    let bb = select(20u, 18u, QTYPE == 1u);
    let off = rb + u * bb;
    let d = f16_at(off);
    var m = 0.0;
    var qoff = off + 2u;
    if (QTYPE == 2u) {
        m = f16_at(off + 2u);
        qoff = off + 4u;
    }
    let sh = 4u * (h / 2u);
    let qo = qoff + 8u * (h % 2u);
    return Eight(q4x4(load32(qo), sh, d, m), q4x4(load32(qo + 4u), sh, d, m));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * TR;
    let t0 = wg.y * TT;
    let tr = lid % 16u;
    let tt = lid / 16u;
    let rb = row_bytes();
    let cols4 = p.cols / 4u;
    // Dequantization role: row lid / 4, elements 8 · (lid % 4) .. + 8 of each step.
    let dr = lid / 4u;
    let dh = lid % 4u;
    // Staging role: token lid / 8, vec4 lid % 8 of each step.
    let xl = lid / 8u;
    let xq = lid % 8u;
    // Rows tr + 16 i (component i), tokens tt (acc0) and tt + 16 (acc1).
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);

    for (var u = 0u; u < p.blocks_per_row; u = u + 1u) {
        var v = Eight(vec4<f32>(0.0), vec4<f32>(0.0));
        if (r0 + dr < p.rows) {
            v = dequant8((r0 + dr) * rb, u, dh);
        }
        // Element e = 8 dh + i of the unit goes to wt[e / 4][dr], component e % 4.
        wt[(2u * dh) * TR + dr] = v.lo;
        wt[(2u * dh + 1u) * TR + dr] = v.hi;
        var xv = vec4<f32>(0.0);
        if (t0 + xl < p.n_tokens) {
            xv = x[(t0 + xl) * cols4 + u * 8u + xq];
        }
        xt[xq * TT + xl] = xv;
        workgroupBarrier();
        for (var q = 0u; q < 8u; q = q + 1u) {
            let a0 = xt[q * TT + tt];
            let a1 = xt[q * TT + tt + 16u];
            let wb = q * TR + tr;
            let w0 = wt[wb];
            let w1 = wt[wb + 16u];
            let w2 = wt[wb + 32u];
            let w3 = wt[wb + 48u];
            acc0 = acc0 + vec4<f32>(dot(w0, a0), dot(w1, a0), dot(w2, a0), dot(w3, a0));
            acc1 = acc1 + vec4<f32>(dot(w0, a1), dot(w1, a1), dot(w2, a1), dot(w3, a1));
        }
        workgroupBarrier();
    }

    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = r0 + tr + 16u * i;
        if (row < p.rows) {
            let t_0 = t0 + tt;
            let t_1 = t_0 + 16u;
            if (t_0 < p.n_tokens) {
                y[t_0 * p.out_stride + p.row0 + row] = acc0[i];
            }
            if (t_1 < p.n_tokens) {
                y[t_1 * p.out_stride + p.row0 + row] = acc1[i];
            }
        }
    }
}
