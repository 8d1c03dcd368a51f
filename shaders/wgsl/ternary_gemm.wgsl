// Tiled ternary GEMM with INT8 activations (BitNet b1.58 prefill), reading tern's packed codes
// (runtime/format/src/ternary.rs): y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t.
//
// One workgroup computes a tile of TR = 64 rows × TT = 16 · NJ tokens (32 or 64). Per K step it
// decodes CW code words of each of its rows (NJ = 2: 8 words, 128 columns of 2bit, 160 of base3;
// NJ = 4: 6 words, 96 columns) into int8 trits packed 4 per u32 in workgroup memory, stages the
// same columns of its TT tokens' int8 activations next to them, and each invocation accumulates a
// 4-row × NJ-token micro-tile with `dot4I8Packed` (a DP4A instruction where the adapter has one,
// an exact polyfill elsewhere). So every weight word is read from memory once per TT tokens
// instead of once per token (ternary_gemv.wgsl); ternary_gemm_t128.wgsl is the 128-token tile of
// 2bit weights with one scale group. NJ = 4 doubles the products per workgroup-memory
// read of a trit vector (8 vec4 reads feed 64 dot4 instead of 6 feeding 32) and halves the weight
// re-reads; with 6 words per step its two tiles take 12 KiB (WebGPU guarantees 16352 B), and it
// is 2bit only (base3's 160-column steps). The next
// step's global loads are issued before the current step's products (software pipeline), and
// the accumulators are vectors with constant components (arrays indexed in loops went to local
// memory on NVIDIA: 2.4× slower). H100, 2bit 6912 × 2560 × 512 tokens: ~0.5 ms, ~36 TOPS.
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
//   ACT4        0 = INT8 activations; 1 = INT4 (BitNet a4.8, 8 per u32 as act_quant_a48.wgsl packs
//               them): each staged vec4 of 32 int4 columns is expanded to two vec4s of int8 in
//               workgroup memory, so the products are the INT8 kernel's (same integers, same bits)
//   DOT         1 = `dot4I8Packed`, 0 = the plain byte-by-byte sum (adapters without the packed
//               integer dot product; same integers)
//   NJ          tokens per invocation: 2 (TT = 32) or 4 (TT = 64, LAYOUT 0 only)
//
// Bindings (logical shapes), as ternary_gemv.wgsl:
//   w   : one part of the weight: [rows_part][words_per_row] u32 codes, then the part's scales
//         (at word `scale_word_offset`; group 0: one scale, else [rows_part][groups_per_row])
//   xq  : [n_tokens][act_stride / 4] vec4<u32>, int8 activations packed 4 per word, zero past
//         `cols` (act_quant_int8; act_stride is a multiple of 20 words, so rows are 16-B aligned)
//   xs  : [n_tokens] f32 activation multipliers
//   y   : [n_tokens][out_stride] f32; this part writes columns row0 .. row0 + rows_part
// Grid: x = row tiles of the part, y = token tiles.

// #import common
// #import ternary_ops
// #import ternary_params

override LAYOUT: u32 = 0u;
override SCALE_TYPE: u32 = 0u;
override ACT4: u32 = 0u;
override DOT: u32 = 1u;
override NJ: u32 = 2u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
const TR: u32 = 64u; // rows per tile
const NOB: u32 = 0xffffffffu; // "no further group boundary"

// One array (15 KiB): trits [q][row] (q = 16-column sub-step) at 0 .. kq_n · TR, then the
// activations [q][token] from `ab = kq_n · TR` (2bit: 384 + 384 vec4 with NJ = 4, 512 + 256
// with NJ = 2; base3: 640 + 320).
var<workgroup> tile: array<vec4<u32>, 960>;

// Micro-tile of this invocation: rows tr + 16 i (component i), tokens tt + 16 j (acc_j/sum_j;
// j = 2, 3 only with NJ = 4). Vectors with constant components stay in registers.
var<private> acc0: vec4<i32>;
var<private> acc1: vec4<i32>;
var<private> acc2: vec4<i32>;
var<private> acc3: vec4<i32>;
var<private> sum0: vec4<f32>;
var<private> sum1: vec4<f32>;
var<private> sum2: vec4<f32>;
var<private> sum3: vec4<f32>;

// Code words per row per K step (CW).
fn cw_n() -> u32 {
    return select(8u, 6u, NJ == 4u);
}

// Tokens per tile (TT).
fn tt_n() -> u32 {
    return 16u * NJ;
}

fn row_scale(row: u32, g: u32) -> f32 {
    if (row >= p.rows) {
        return 0.0;
    }
    // mode bit 5: gate/up row pairs (ternary_gemv.wgsl), two per-tensor scales by row parity
    let pair = select(0u, (p.row0 + row) & 1u, ((p.mode >> 5u) & 1u) == 1u);
    return scale_at(select(row * p.groups_per_row + g, pair, p.group == 0u));
}

// End of scale group g for the invocation's rows: sum += f32(acc) · scale, acc = 0 (per
// component: one f32 multiply and one add, as the reference).
fn flush(g: u32, row_base: u32) {
    let sc = vec4<f32>(
        row_scale(row_base, g),
        row_scale(row_base + 16u, g),
        row_scale(row_base + 32u, g),
        row_scale(row_base + 48u, g)
    );
    sum0 = sum0 + vec4<f32>(acc0) * sc;
    sum1 = sum1 + vec4<f32>(acc1) * sc;
    acc0 = vec4<i32>(0);
    acc1 = vec4<i32>(0);
    if (NJ == 4u) {
        sum2 = sum2 + vec4<f32>(acc2) * sc;
        sum3 = sum3 + vec4<f32>(acc3) * sc;
        acc2 = vec4<i32>(0);
        acc3 = vec4<i32>(0);
    }
}

fn dot16(wv: vec4<u32>, a: vec4<u32>) -> i32 {
    return dot4(wv.x, a.x) + dot4(wv.y, a.y) + dot4(wv.z, a.z) + dot4(wv.w, a.w);
}

// Code word `it` (tile row it / CW, word it % CW) of step s; `ok` false past the row or part
// (and for it ≥ TR · CW: NJ = 4 has 384 words per step for 512 invocation slots).
struct Code {
    cw: u32,
    ok: bool,
}

fn load_code(r0: u32, s: u32, it: u32) -> Code {
    let cw = cw_n();
    let row = r0 + it / cw;
    let wi = s * cw + it % cw;
    var c = Code(0u, it < TR * cw && row < p.rows && wi < p.words_per_row);
    if (c.ok) {
        c.cw = w[row * p.words_per_row + wi];
    }
    return c;
}

// Decode a code word into wt (packed int8 trits; zeros when not ok).
fn store_code(it: u32, c: Code) {
    let cw = cw_n();
    if (it >= TR * cw) {
        return;
    }
    let lr = it / cw;
    let k = it % cw;
    if (LAYOUT == 0u) {
        var v = vec4<u32>(0u);
        if (c.ok) {
            v = vec4<u32>(trits2(c.cw, 0u), trits2(c.cw, 1u), trits2(c.cw, 2u), trits2(c.cw, 3u));
        }
        tile[k * TR + lr] = v;
    } else {
        var pk = array<u32, 5>(0u, 0u, 0u, 0u, 0u);
        if (c.ok) {
            for (var b = 0u; b < 4u; b = b + 1u) {
                let byte = (c.cw >> (8u * b)) & 0xffu;
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
            tile[(pw / 4u) * TR + lr][pw % 4u] = pk[q];
        }
    }
}

// Activation vec4 `it` (token it / kq_n, vec4 it % kq_n) of step s, zero past the data. With
// ACT4, `it` counts vec4s of int4 (32 columns: two 16-column sub-steps), kq_n / 2 per token.
fn load_act(t0: u32, s: u32, it: u32, kq_n: u32) -> vec4<u32> {
    let per = select(kq_n, kq_n / 2u, ACT4 == 1u);
    let tok = t0 + it / per;
    let qi = s * per + it % per;
    let astride4 = p.act_stride / 4u;
    if (it < tt_n() * per && tok < p.n_tokens && qi < astride4) {
        return xq[tok * astride4 + qi];
    }
    return vec4<u32>(0u);
}

fn store_act(it: u32, kq_n: u32, v: vec4<u32>) {
    let ab = kq_n * TR;
    if (ACT4 == 1u) {
        let per = kq_n / 2u;
        if (it < tt_n() * per) {
            // Words of 8 columns: low nibbles are columns 0-3, high nibbles 4-7 of each word.
            let lo = vec4<u32>(sext4(v.x & 0x0f0f0f0fu), sext4((v.x >> 4u) & 0x0f0f0f0fu),
                sext4(v.y & 0x0f0f0f0fu), sext4((v.y >> 4u) & 0x0f0f0f0fu));
            let hi = vec4<u32>(sext4(v.z & 0x0f0f0f0fu), sext4((v.z >> 4u) & 0x0f0f0f0fu),
                sext4(v.w & 0x0f0f0f0fu), sext4((v.w >> 4u) & 0x0f0f0f0fu));
            let q = 2u * (it % per);
            let tok = it / per;
            tile[ab + q * tt_n() + tok] = lo;
            tile[ab + (q + 1u) * tt_n() + tok] = hi;
        }
        return;
    }
    if (it < tt_n() * kq_n) {
        tile[ab + (it % kq_n) * tt_n() + it / kq_n] = v;
    }
}

fn store_y(t: u32, row: u32, sum: f32) {
    if (t < p.n_tokens) {
        y[t * p.out_stride + p.row0 + row] = div_rn(sum, xs[t]);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kq_n = select(10u, cw_n(), LAYOUT == 0u); // 16-column sub-steps per K step
    let step_cols = 16u * kq_n;
    let ab = kq_n * TR; // start of the activations in `tile`
    let r0 = wg.x * TR;
    let t0 = wg.y * tt_n();
    let tr = lid % 16u;
    let tt = lid / 16u;
    let row_base = r0 + tr;
    let n_steps = (p.cols + step_cols - 1u) / step_cols;
    let per_word = p.group != 0u && p.group % 16u != 0u;
    // Next group boundary (a column where a new scale group starts) and the current group.
    var nb = NOB;
    if (p.group != 0u && p.group < p.cols) {
        nb = p.group;
    }
    var g = 0u;
    acc0 = vec4<i32>(0);
    acc1 = vec4<i32>(0);
    acc2 = vec4<i32>(0);
    acc3 = vec4<i32>(0);
    sum0 = vec4<f32>(0.0);
    sum1 = vec4<f32>(0.0);
    sum2 = vec4<f32>(0.0);
    sum3 = vec4<f32>(0.0);

    // Software pipeline: the global loads of step s + 1 are issued before step s's products.
    // Per invocation: code words lid and lid + 256 (TR · CW = 512 or 384), activation vec4s lid
    // and lid + 256 (TT · kq_n = 256, 320 or 384; INT4: half as many).
    var c_a = load_code(r0, 0u, lid);
    var c_b = load_code(r0, 0u, lid + WG);
    var x_a = load_act(t0, 0u, lid, kq_n);
    var x_b = load_act(t0, 0u, lid + WG, kq_n);
    for (var s = 0u; s < n_steps; s = s + 1u) {
        store_code(lid, c_a);
        store_code(lid + WG, c_b);
        store_act(lid, kq_n, x_a);
        store_act(lid + WG, kq_n, x_b);
        workgroupBarrier();
        if (s + 1u < n_steps) {
            c_a = load_code(r0, s + 1u, lid);
            c_b = load_code(r0, s + 1u, lid + WG);
            x_a = load_act(t0, s + 1u, lid, kq_n);
            x_b = load_act(t0, s + 1u, lid + WG, kq_n);
        }

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
                let abq = ab + q * tt_n() + tt;
                let a0 = tile[abq];
                let a1 = tile[abq + 16u];
                let wb = q * TR + tr;
                let w0 = tile[wb];
                let w1 = tile[wb + 16u];
                let w2 = tile[wb + 32u];
                let w3 = tile[wb + 48u];
                acc0 = acc0 + vec4<i32>(dot16(w0, a0), dot16(w1, a0), dot16(w2, a0), dot16(w3, a0));
                acc1 = acc1 + vec4<i32>(dot16(w0, a1), dot16(w1, a1), dot16(w2, a1), dot16(w3, a1));
                if (NJ == 4u) {
                    let a2 = tile[abq + 32u];
                    let a3 = tile[abq + 48u];
                    acc2 = acc2 + vec4<i32>(dot16(w0, a2), dot16(w1, a2), dot16(w2, a2),
                        dot16(w3, a2));
                    acc3 = acc3 + vec4<i32>(dot16(w0, a3), dot16(w1, a3), dot16(w2, a3),
                        dot16(w3, a3));
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
                let abq = ab + q * tt_n() + tt;
                let a0 = tile[abq][comp];
                let a1 = tile[abq + 16u][comp];
                var a2 = 0u;
                var a3 = 0u;
                if (NJ == 4u) {
                    a2 = tile[abq + 32u][comp];
                    a3 = tile[abq + 48u][comp];
                }
                let wb = q * TR + tr;
                let wv = vec4<u32>(tile[wb][comp], tile[wb + 16u][comp], tile[wb + 32u][comp],
                    tile[wb + 48u][comp]);
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
                    let b0 = a0 & m;
                    let b1 = a1 & m;
                    acc0 = acc0 + vec4<i32>(dot4(wv.x, b0), dot4(wv.y, b0), dot4(wv.z, b0),
                        dot4(wv.w, b0));
                    acc1 = acc1 + vec4<i32>(dot4(wv.x, b1), dot4(wv.y, b1), dot4(wv.z, b1),
                        dot4(wv.w, b1));
                    if (NJ == 4u) {
                        let b2 = a2 & m;
                        let b3 = a3 & m;
                        acc2 = acc2 + vec4<i32>(dot4(wv.x, b2), dot4(wv.y, b2), dot4(wv.z, b2),
                            dot4(wv.w, b2));
                        acc3 = acc3 + vec4<i32>(dot4(wv.x, b3), dot4(wv.y, b3), dot4(wv.z, b3),
                            dot4(wv.w, b3));
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
        if (row < p.rows) {
            store_y(t0 + tt, row, sum0[i]);
            store_y(t0 + tt + 16u, row, sum1[i]);
            if (NJ == 4u) {
                store_y(t0 + tt + 32u, row, sum2[i]);
                store_y(t0 + tt + 48u, row, sum3[i]);
            }
        }
    }
}
