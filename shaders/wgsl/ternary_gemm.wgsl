// Tiled ternary GEMM with INT8 activations (BitNet b1.58 prefill), reading tern's packed codes
// (runtime/format/src/ternary.rs): y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t.
//
// One workgroup computes a tile of TR = 64 rows × TT = 32 tokens. Per K step it decodes CW = 8 code
// words of each of its rows (128 columns of 2bit, 160 of base3) into int8 trits packed 4 per u32
// in workgroup memory, stages the same columns of its 32 tokens' int8 activations next to them,
// and each invocation accumulates a 4-row × 2-token micro-tile with `dot4I8Packed` (a DP4A
// instruction where the adapter has one, an exact polyfill elsewhere). So every weight word is
// read from memory once per 32 tokens instead of once per token (ternary_gemv.wgsl).
//
// Bit-exact with ternary_gemv.wgsl and tern_reference's `TernaryWeights::dot_int`: the per-group
// sums are i32 (exact, order-free); at each group boundary, in increasing group order,
// `sum = sum + f32(acc_g) · scale_g` starting from 0.0, then one correctly rounded `div_rn(sum,
// s_t)`: the same f32 operations in the same order as the GEMV and the reference.
//
// Group boundaries: group 0 (one scale) has none; `group % 16 == 0` puts them on the 16-column
// sub-steps (checked once per sub-step); any other group is handled per packed activation word,
// masking the bytes on each side of a boundary.
//
// Override constants:
//   LAYOUT      0 = 2bit (16 codes per u32, code = trit + 1 at bits 2j), 1 = base3 (20 trits per
//               u32, 5 per byte, TQ1_0 fixed point: digit n = ((byte · 3^n) mod 256 · 3) >> 8)
//   SCALE_TYPE  0 = f32, 1 = f16, 2 = bf16
//
// Bindings (logical shapes), as ternary_gemv.wgsl:
//   w   : one part of the weight: [rows_part][words_per_row] u32 codes, then the part's scales
//         (at word `scale_word_offset`; group 0: one scale, else [rows_part][groups_per_row])
//   xq  : [n_tokens][act_stride / 4] vec4<u32>, int8 activations packed 4 per word, zero past
//         `cols` (act_quant_int8; act_stride is a multiple of 20 words, so rows are 16-B aligned)
//   xs  : [n_tokens] f32 activation multipliers
//   y   : [n_tokens][out_stride] f32; this part writes columns row0 .. row0 + rows_part
// Grid: x = row tiles of the part, y = token tiles.

struct Params {
    rows: u32,
    cols: u32,
    words_per_row: u32,
    group: u32,
    groups_per_row: u32,
    scale_word_offset: u32,
    act_stride: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

override LAYOUT: u32 = 0u;
override SCALE_TYPE: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
const TR: u32 = 64u; // rows per tile
const TT: u32 = 32u; // tokens per tile
const CW: u32 = 8u; // code words per row per K step
const MAXQ: u32 = 10u; // vec4s of packed trits per row per K step (base3: 8 · 20 / 16)
const NOB: u32 = 0xffffffffu; // "no further group boundary"

// Trits: [q][row] (q = 16-column sub-step), activations: [q][token]. 10240 + 5120 B.
var<workgroup> wt: array<vec4<u32>, 640>; // MAXQ · TR
var<workgroup> at: array<vec4<u32>, 320>; // MAXQ · TT

// Micro-tile of this invocation: rows tr + 16 i (i < 4), tokens tt + 16 j (j < 2), index 2 i + j.
var<private> acc: array<i32, 8>;
var<private> sum: array<f32, 8>;

fn scale_at(i: u32) -> f32 {
    let o = p.scale_word_offset;
    if (SCALE_TYPE == 0u) {
        return bitcast<f32>(w[o + i]);
    }
    let word = w[o + (i >> 1u)];
    let h = (word >> (16u * (i & 1u))) & 0xffffu;
    if (SCALE_TYPE == 1u) {
        return f16_bits_to_f32(h);
    }
    return bitcast<f32>(h << 16u);
}

// Four 2-bit codes (bits 8b .. 8b + 8 of cw) as four int8 trits (code − 1) in one word.
fn trits2(cw: u32, b: u32) -> u32 {
    let c = (cw >> (8u * b)) & 0xffu;
    let x = (c & 3u) | ((c << 6u) & 0x300u) | ((c << 12u) & 0x30000u) | ((c << 18u) & 0x3000000u);
    // Per byte v ∈ {0, 1, 2}: ((v | 0x80) − 1) ^ 0x80 = v − 1 as int8, no borrow between bytes.
    return ((x | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}

// End of scale group g for the invocation's rows: sum += f32(acc) · scale, acc = 0.
fn flush(g: u32, row_base: u32) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row_base + 16u * i;
        var sc = 0.0;
        if (row < p.rows) {
            sc = scale_at(select(row * p.groups_per_row + g, 0u, p.group == 0u));
        }
        for (var j = 0u; j < 2u; j = j + 1u) {
            let k = 2u * i + j;
            sum[k] = sum[k] + f32(acc[k]) * sc;
            acc[k] = 0;
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kq_n = select(10u, 8u, LAYOUT == 0u); // 16-column sub-steps per K step
    let step_cols = 16u * kq_n;
    let r0 = wg.x * TR;
    let t0 = wg.y * TT;
    let tr = lid % 16u;
    let tt = lid / 16u;
    let row_base = r0 + tr;
    let astride4 = p.act_stride / 4u;
    let n_steps = (p.cols + step_cols - 1u) / step_cols;
    let per_word = p.group != 0u && p.group % 16u != 0u;
    // Next group boundary (a column where a new scale group starts) and the current group.
    var nb = NOB;
    if (p.group != 0u && p.group < p.cols) {
        nb = p.group;
    }
    var g = 0u;
    for (var k = 0u; k < 8u; k = k + 1u) {
        acc[k] = 0;
        sum[k] = 0.0;
    }

    for (var s = 0u; s < n_steps; s = s + 1u) {
        // Decode this step's code words of the tile's rows into packed int8 trits.
        for (var it = lid; it < TR * CW; it = it + WG) {
            let lr = it / CW;
            let k = it % CW;
            let row = r0 + lr;
            let wi = s * CW + k;
            let ok = row < p.rows && wi < p.words_per_row;
            var cw = 0u;
            if (ok) {
                cw = w[row * p.words_per_row + wi];
            }
            if (LAYOUT == 0u) {
                var v = vec4<u32>(0u);
                if (ok) {
                    v = vec4<u32>(trits2(cw, 0u), trits2(cw, 1u), trits2(cw, 2u), trits2(cw, 3u));
                }
                wt[k * TR + lr] = v;
            } else {
                var pk = array<u32, 5>(0u, 0u, 0u, 0u, 0u);
                if (ok) {
                    for (var b = 0u; b < 4u; b = b + 1u) {
                        let byte = (cw >> (8u * b)) & 0xffu;
                        var pw = 1u;
                        for (var m = 0u; m < 5u; m = m + 1u) {
                            let j = b * 5u + m;
                            let d = (((byte * pw) & 0xffu) * 3u) >> 8u;
                            pw = pw * 3u;
                            pk[j / 4u] = pk[j / 4u] | (((d + 0xffu) & 0xffu) << (8u * (j % 4u)));
                        }
                    }
                }
                for (var q = 0u; q < 5u; q = q + 1u) {
                    let pw = k * 5u + q;
                    wt[(pw / 4u) * TR + lr][pw % 4u] = pk[q];
                }
            }
        }
        // Stage the same columns of the tile's tokens.
        for (var it = lid; it < TT * kq_n; it = it + WG) {
            let lt = it / kq_n;
            let q = it % kq_n;
            let tok = t0 + lt;
            let qi = s * kq_n + q;
            var v = vec4<u32>(0u);
            if (tok < p.n_tokens && qi < astride4) {
                v = xq[tok * astride4 + qi];
            }
            at[q * TT + lt] = v;
        }
        workgroupBarrier();

        let c0 = s * step_cols;
        if (!per_word) {
            for (var q = 0u; q < kq_n; q = q + 1u) {
                if (c0 + 16u * q == nb) {
                    flush(g, row_base);
                    g = g + 1u;
                    nb = nb + p.group;
                    if (nb >= p.cols) {
                        nb = NOB;
                    }
                }
                let a0 = at[q * TT + tt];
                let a1 = at[q * TT + tt + 16u];
                for (var i = 0u; i < 4u; i = i + 1u) {
                    let wv = wt[q * TR + tr + 16u * i];
                    acc[2u * i] = acc[2u * i] + dot4I8Packed(wv.x, a0.x) + dot4I8Packed(wv.y, a0.y)
                        + dot4I8Packed(wv.z, a0.z) + dot4I8Packed(wv.w, a0.w);
                    acc[2u * i + 1u] = acc[2u * i + 1u] + dot4I8Packed(wv.x, a1.x)
                        + dot4I8Packed(wv.y, a1.y) + dot4I8Packed(wv.z, a1.z)
                        + dot4I8Packed(wv.w, a1.w);
                }
            }
        } else {
            // Groups that are not a multiple of 16 columns: one packed word (4 columns) at a
            // time, split at boundaries with byte masks on the activations.
            for (var pw = 0u; pw < 4u * kq_n; pw = pw + 1u) {
                let cw0 = c0 + 4u * pw;
                if (cw0 >= p.cols) {
                    break;
                }
                let q = pw / 4u;
                let comp = pw % 4u;
                let a0 = at[q * TT + tt][comp];
                let a1 = at[q * TT + tt + 16u][comp];
                var e = 0u;
                loop {
                    if (cw0 + e == nb) {
                        flush(g, row_base);
                        g = g + 1u;
                        nb = nb + p.group;
                        if (nb >= p.cols) {
                            nb = NOB;
                        }
                    }
                    let e1 = min(4u, nb - cw0);
                    let m = (0xffffffffu >> (32u - 8u * (e1 - e))) << (8u * e);
                    for (var i = 0u; i < 4u; i = i + 1u) {
                        let wv = wt[q * TR + tr + 16u * i][comp];
                        acc[2u * i] = acc[2u * i] + dot4I8Packed(wv, a0 & m);
                        acc[2u * i + 1u] = acc[2u * i + 1u] + dot4I8Packed(wv, a1 & m);
                    }
                    e = e1;
                    if (e >= 4u) {
                        break;
                    }
                }
            }
        }
        workgroupBarrier();
    }
    flush(g, row_base);

    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row_base + 16u * i;
        for (var j = 0u; j < 2u; j = j + 1u) {
            let tok = t0 + tt + 16u * j;
            if (row < p.rows && tok < p.n_tokens) {
                y[tok * p.out_stride + p.row0 + row] = div_rn(sum[2u * i + j], xs[tok]);
            }
        }
    }
}
