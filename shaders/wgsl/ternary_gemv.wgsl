// Ternary GEMV/GEMM with INT8 activations (BitNet b1.58), reading tern's packed codes directly
// (runtime/format/src/ternary.rs): y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t.
// Integer inner sums (i32, exact and order-free), then f32 in the reference's order: groups in
// increasing order starting from 0.0, then one correctly rounded division by s_t. Matches
// tern_reference's `TernaryWeights::dot_int` path bit for bit on drivers that do not contract
// `acc · scale + sum` into an FMA (the grouped case only; per-tensor scale has no addition).
//
// Override constants:
//   LAYOUT      0 = 2bit (16 codes per u32, code = trit + 1 at bits 2j), 1 = base3 (20 trits per
//               u32, 5 per byte, TQ1_0 fixed point: digit n = ((byte · 3^n) mod 256 · 3) >> 8)
//   SCALE_TYPE  0 = f32, 1 = f16, 2 = bf16
//   TPR         invocations per row (divides 256); rows per workgroup = 256 / TPR
//   ACT4        0 = INT8 activations (4 per u32), 1 = INT4 activations (BitNet a4.8: 8 per u32 as
//               act_quant_a48.wgsl packs them; expanded to int8 bytes in registers)
//   DOT         1 = `dot4I8Packed` (a DP4A instruction where the adapter has the packed integer
//               dot product), 0 = the plain byte-by-byte sum (same integers)
//
// Bindings (logical shapes):
//   w   : one part of the weight: [rows_part][words_per_row] u32 codes, then the part's scales
//         (at word `scale_word_offset`; group 0: one scale, else [rows_part][groups_per_row])
//   xq  : [n_tokens][act_stride] u32, int8 activations packed 4 per word (act_quant_int8)
//   xs  : [n_tokens] f32 activation multipliers
//   y   : [n_tokens][out_stride] f32; this part writes columns row0 .. row0 + rows_part
//
// `p.mode` bits 2..3: the epilogue (issue 15; elementwise.wgsl's arithmetic, so the same bits as
// the separate pass): 0 y = W·a, 1 y = y + W·a (residual add in place), 2 y = relu(y)² · W·a,
// 3 y = silu(y) · W·a (the GLU with the gate already in y). The fused norm prologue and the wide
// loads are `ternary_gemv_wide.wgsl`.
// `p.mode` bit 5: the rows are gate/up pairs (row 2j the gate's row j, row 2j + 1 the up
// projection's; parts start on a pair): a per-tensor scale (group 0) is two scales, the gate's for
// even rows and the up projection's for odd rows; with epilogue 2 or 3 the pair's GLU is the
// epilogue, y[t][j] = relu(g)² · u or silu(g) · u with g, u the pair's results (y has
// out_stride / 2 columns): gate/up as one GEMV, elementwise.wgsl's arithmetic, the same bits as the
// gate GEMV, then the up GEMV with the GLU epilogue.

// #import common
// #import ternary_epilogue
// #import ternary_ops
// #import ternary_params
// #import int4_act

override LAYOUT: u32 = 0u;
override SCALE_TYPE: u32 = 0u;
override TPR: u32 = 32u;
override ACT4: u32 = 0u;
override DOT: u32 = 1u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<u32>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
// Per-row, per-group integer sums: rows_per_wg · groups_per_row ≤ GSUM (checked by the launcher).
const GSUM: u32 = 2048u;
// The pair epilogue: each row's result, read by its pair partner.
var<workgroup> pres: array<f32, 64>; // rows per workgroup (256 / TPR, TPR ≥ 4)
var<workgroup> gsum: array<atomic<i32>, GSUM>;
// base-3 (LAYOUT 1): byte → its 5 trits as 2-bit codes (trit + 1) at bits 2m (issue 15).
var<workgroup> lut: array<u32, 256>;

fn act(base: u32, c: u32) -> i32 {
    if (ACT4 == 1u) {
        let j = c & 7u;
        let word = xq[base + (c >> 3u)];
        return extractBits(bitcast<i32>(word), select(8u * (j - 4u) + 4u, 8u * j, j < 4u), 4u);
    }
    let word = xq[base + (c >> 2u)];
    return extractBits(bitcast<i32>(word), 8u * (c & 3u), 8u);
}

// Activation word aw (4 columns) as 4 int8 bytes, from packed int8 or packed int4 activations.
fn act_word(base: u32, aw: u32) -> u32 {
    if (ACT4 == 1u) {
        let w4 = xq[base + (aw >> 1u)];
        return sext4(select(w4 >> 4u, w4, (aw & 1u) == 0u) & 0x0f0f0f0fu);
    }
    return xq[base + aw];
}

// Trit of element j (0..16 or 0..20) of code word cw (the per-element path of grouped scales).
fn trit(cw: u32, j: u32) -> i32 {
    if (LAYOUT == 0u) {
        return i32((cw >> (2u * j)) & 3u) - 1;
    }
    let byte = (cw >> (8u * (j / 5u))) & 0xffu;
    var pw = 1u;
    for (var k = 0u; k < j % 5u; k = k + 1u) {
        pw = pw * 3u;
    }
    return i32((((byte * pw) & 0xffu) * 3u) >> 8u) - 1;
}

// Base-3 (LAYOUT 1): Σ trit · act of each of the 5 activation words (4 columns each) that code
// word cw's 20 trits pair with. The trits as 20 2-bit codes (trit + 1) through the byte table:
// codes 0..15 in lo, 16..19 in hi; c0 is a multiple of 20, so c0 / 4 is whole. Four codes are
// spread to one per byte and turned into trit bytes (code + 0x7f has no carry; ^ 0x80 maps 0, 1,
// 2 to −1, 0, 1): one packed dot per activation word. Columns past `cols` inside the row's last
// activation word are zero (the quantizers pad with zeros); activation words past the row (an
// odd `cols`) count as zero. Five scalars, not an array (a private array may live in memory).
struct B3 {
    d0: i32,
    d1: i32,
    d2: i32,
    d3: i32,
    d4: i32,
}

// Σ trit · act of the 4 codes in byte b (2 bits each) with activation word aw.
fn b3_one(b: u32, abase: u32, aw: u32, awords: u32) -> i32 {
    let a = select(0u, act_word(abase, min(aw, awords - 1u)), aw < awords);
    let sp = b | (b << 6u);
    let codes = (sp | (sp << 12u)) & 0x03030303u;
    return dot4((codes + 0x7f7f7f7fu) ^ 0x80808080u, a);
}

fn b3_dots(cw: u32, abase: u32, c0: u32) -> B3 {
    let l0 = lut[cw & 0xffu];
    let l1 = lut[(cw >> 8u) & 0xffu];
    let l2 = lut[(cw >> 16u) & 0xffu];
    let l3 = lut[cw >> 24u];
    let lo = l0 | (l1 << 10u) | (l2 << 20u) | (l3 << 30u);
    let hi = l3 >> 2u;
    let aw0 = c0 >> 2u;
    let awords = select(p.act_stride, 2u * p.act_stride, ACT4 == 1u);
    return B3(
        b3_one(lo & 0xffu, abase, aw0, awords),
        b3_one((lo >> 8u) & 0xffu, abase, aw0 + 1u, awords),
        b3_one((lo >> 16u) & 0xffu, abase, aw0 + 2u, awords),
        b3_one(lo >> 24u, abase, aw0 + 3u, awords),
        b3_one(hi, abase, aw0 + 4u, awords),
    );
}

// Σ trit · act over the first n elements of code word cw (columns c0 .. c0 + n).
fn word_dot(cw: u32, abase: u32, c0: u32, n: u32) -> i32 {
    var acc = 0i;
    if (LAYOUT == 0u && ACT4 == 1u) {
        // INT4: 16 codes pair with 2 activation words (word c0/8: columns c0 .. c0 + 8, its low
        // nibbles c0 .. c0 + 4, its high nibbles c0 + 4 .. c0 + 8; then c0 + 8 .. c0 + 16), each
        // nibble sign-extended to a byte. Byte aw of cw spread to one code per byte, then turned
        // into trit bytes (code + 0x7f has no carry; ^ 0x80 gives −1, 0, 1): one packed dot per 4
        // columns. Columns past `cols` have zero activations (the quantizer pads with zeros).
        let a4 = abase + (c0 >> 3u);
        let wa = xq[a4];
        let wb = xq[a4 + 1u];
        let av = array<u32, 4>(
            sext4_or(wa & 0x0f0f0f0fu),
            sext4_or((wa >> 4u) & 0x0f0f0f0fu),
            sext4_or(wb & 0x0f0f0f0fu),
            sext4_or((wb >> 4u) & 0x0f0f0f0fu),
        );
        for (var aw = 0u; aw < 4u; aw = aw + 1u) {
            let b = (cw >> (8u * aw)) & 0xffu;
            let sp = b | (b << 12u);
            let codes = (sp | (sp << 6u)) & 0x03030303u;
            acc = acc + dot4((codes + 0x7f7f7f7fu) ^ 0x80808080u, av[aw]);
        }
    } else if (LAYOUT == 0u) {
        // 16 codes pair with 4 activation words (c0 is a multiple of 16). trit = code − 1, so
        // Σ trit·x = Σ code·x − Σ x: two packed int8 dot products per activation word. Columns
        // past `cols` have zero activations (act_quant_int8 pads with zeros), so no mask is needed.
        for (var aw = 0u; aw < 4u; aw = aw + 1u) {
            let a = act_word(abase, (c0 >> 2u) + aw);
            let b = (cw >> (8u * aw)) & 0xffu;
            let codes = (b & 3u) | (((b >> 2u) & 3u) << 8u) | (((b >> 4u) & 3u) << 16u)
                | (((b >> 6u) & 3u) << 24u);
            acc = acc + dot4(codes, a) - dot4(0x01010101u, a);
        }
    } else {
        let d = b3_dots(cw, abase, c0);
        acc = d.d0 + d.d1 + d.d2 + d.d3 + d.d4;
    }
    return acc;
}

// One code word of the row (word wi, lane's trip order): its dot products into the lane's
// running group sum `acc` of group `cur`, flushed into gsum when the group changes.
fn word_step(
    cw: u32,
    wi: u32,
    abase: u32,
    lrow: u32,
    acc: ptr<function, i32>,
    cur: ptr<function, u32>,
) {
    let gpr = p.groups_per_row;
    let epw = select(20u, 16u, LAYOUT == 0u);
    let c0 = wi * epw;
    let n = min(epw, p.cols - c0);
    var g0 = 0u;
    var g1 = 0u;
    if (p.group != 0u) {
        g0 = c0 / p.group;
        g1 = (c0 + n - 1u) / p.group;
    }
    if (g0 == g1) {
        if (g0 != *cur) {
            atomicAdd(&gsum[lrow * gpr + *cur], *acc);
            *acc = 0;
            *cur = g0;
        }
        *acc = *acc + word_dot(cw, abase, c0, n);
    } else if (LAYOUT == 1u && p.group >= 20u && (p.group & 3u) == 0u) {
        // base-3 word across one group boundary on an activation-word boundary (TQ1_0's
        // 256-column blocks): the words before it go to g0, the rest to g1
        let d = b3_dots(cw, abase, c0);
        let kb = (g1 * p.group - c0) >> 2u;
        let s0 = select(0, d.d0, kb > 0u) + select(0, d.d1, kb > 1u) + select(0, d.d2, kb > 2u)
            + select(0, d.d3, kb > 3u);
        let s1 = (d.d0 + d.d1 + d.d2 + d.d3 + d.d4) - s0;
        if (g0 != *cur) {
            atomicAdd(&gsum[lrow * gpr + *cur], *acc);
            *acc = 0;
            *cur = g0;
        }
        atomicAdd(&gsum[lrow * gpr + *cur], *acc + s0);
        *acc = s1;
        *cur = g1;
    } else {
        for (var j = 0u; j < n; j = j + 1u) {
            let g = (c0 + j) / p.group;
            if (g != *cur) {
                atomicAdd(&gsum[lrow * gpr + *cur], *acc);
                *acc = 0;
                *cur = g;
            }
            *acc = *acc + trit(cw, j) * act(abase, c0 + j);
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let rpw = WG / TPR;
    let lrow = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * rpw + lrow;
    let tok = wg.y;
    let gpr = p.groups_per_row;
    for (var i = lid; i < rpw * gpr; i = i + WG) {
        atomicStore(&gsum[i], 0);
    }
    if (LAYOUT == 1u) {
        // digit m of byte lid: ((lid · 3^m) mod 256 · 3) >> 8, as the code at bits 2m
        var pw = 1u;
        var l = 0u;
        for (var m = 0u; m < 5u; m = m + 1u) {
            l = l | (((((lid * pw) & 0xffu) * 3u) >> 8u) << (2u * m));
            pw = pw * 3u;
        }
        lut[lid] = l;
    }
    workgroupBarrier();
    if (row < p.rows && tok < p.n_tokens) {
        let abase = tok * p.act_stride;
        let wbase = row * p.words_per_row;
        var acc = 0i;
        var cur = 0u; // group that acc belongs to
        // Four code words in flight per trip (their loads issued together), then the same
        // per-word steps in the same order as one word per trip: the same sums.
        var wi = lane;
        for (; wi + 3u * TPR < p.words_per_row; wi = wi + 4u * TPR) {
            let cw0 = w[wbase + wi];
            let cw1 = w[wbase + wi + TPR];
            let cw2 = w[wbase + wi + 2u * TPR];
            let cw3 = w[wbase + wi + 3u * TPR];
            word_step(cw0, wi, abase, lrow, &acc, &cur);
            word_step(cw1, wi + TPR, abase, lrow, &acc, &cur);
            word_step(cw2, wi + 2u * TPR, abase, lrow, &acc, &cur);
            word_step(cw3, wi + 3u * TPR, abase, lrow, &acc, &cur);
        }
        for (; wi < p.words_per_row; wi = wi + TPR) {
            word_step(w[wbase + wi], wi, abase, lrow, &acc, &cur);
        }
        atomicAdd(&gsum[lrow * gpr + cur], acc);
    }
    workgroupBarrier();
    // The row's lanes turn the group sums into products acc_g · scale_g in parallel (the scale
    // loads are independent), stored back as f32 bits; then lane 0 adds them in the reference's
    // order: sum = 0.0, then + product_g for g = 0, 1, ...
    if (row < p.rows && tok < p.n_tokens) {
        for (var g = lane; g < gpr; g = g + TPR) {
            let si = select(row * gpr + g, pair_scale(row), p.group == 0u);
            let prod = f32(atomicLoad(&gsum[lrow * gpr + g])) * scale_at(si);
            atomicStore(&gsum[lrow * gpr + g], bitcast<i32>(prod));
        }
    }
    workgroupBarrier();
    let live = lane == 0u && row < p.rows && tok < p.n_tokens;
    var res = 0.0;
    if (live) {
        var sum = 0.0;
        for (var g = 0u; g < gpr; g = g + 1u) {
            sum = sum + bitcast<f32>(atomicLoad(&gsum[lrow * gpr + g]));
        }
        res = div_rn(sum, xs[tok]);
        pres[lrow] = res;
    }
    if (((p.mode >> 5u) & 1u) == 1u) {
        workgroupBarrier();
    }
    if (live) {
        epilogue((p.mode >> 2u) & 3u, row, tok, res, lrow);
    }
}
