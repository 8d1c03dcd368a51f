// The wide ternary GEMV (issue 15; `TERN_GPU_FUSE_NORM=1` only, where the decode kernel's fused
// variant ternary_gemv_dec_norm.wgsl does not take the shape; see kernels/matmul.rs):
// ternary_gemv.wgsl's contract and bits, plus the fused norm prologue.
// Ternary GEMV with INT8 (or INT4) activations (BitNet b1.58 / a4.8), reading tern's packed codes
// directly (runtime/format/src/ternary.rs): y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} ·
// q_t[c]) / s_t. Integer inner sums (i32, exact and order-free), then f32 in the reference's
// order: groups in increasing order starting from 0.0, then one correctly rounded division by
// s_t. Matches tern_reference's `TernaryWeights::dot_int` path bit for bit on drivers that do not
// contract `acc · scale + sum` into an FMA (the grouped case only).
//
// Decode shape (issue 15): 8 rows per workgroup, 32 invocations per row; rows whose code words
// start 16-byte aligned are read as vec4<u32> (64 2-bit codes or 80 trits per load, consecutive
// lanes on consecutive 16 bytes), two loads in flight per lane; the token's activation row is
// staged once in workgroup memory; base-3 bytes go through a byte → 5-code table.
//
// Override constants:
//   LAYOUT      0 = 2bit (16 codes per u32, code = trit + 1 at bits 2j), 1 = base3 (20 trits per
//               u32, 5 per byte, TQ1_0 fixed point: digit n = ((byte · 3^n) mod 256 · 3) >> 8)
//   SCALE_TYPE  0 = f32, 1 = f16, 2 = bf16
//   TPR         invocations per row (32)
//   ACT4        0 = INT8 activations (4 per u32), 1 = INT4 activations (BitNet a4.8: 8 per u32 as
//               act_quant_a48.wgsl packs them; expanded to int8 bytes in registers)
//   DOT         1 = `dot4I8Packed`, 0 = the plain byte-by-byte sum (same integers)
//
// `p.mode` (uniform, so every branch on it is uniform):
//   bits 0..1  prologue. 0: `xa` holds the quantized activations ([n_tokens][act_stride] u32) and
//              `xf` their multipliers. 1: `xa` holds the f32 rows x ([n_tokens][cols]) and `xf`
//              an RMSNorm weight: every workgroup computes RMSNorm(x) and its INT8 absmax (ACT4 0)
//              or INT4 absmean (ACT4 1) quantization itself, with exactly the arithmetic and
//              reduction order of rmsnorm_quant.wgsl / act_quant_a48.wgsl (so the codes and the
//              multiplier are those kernels' bits), into workgroup memory: one dispatch fewer.
//   bits 2..3  epilogue. 0: y = W·a. 1: y = y + W·a (the residual add, in place).
//              2: y = relu(y)² · (W·a), 3: y = silu(y) · (W·a) (the GLU with the gate already in
//              y, elementwise.wgsl's arithmetic).
//   bit 4      the part's rows start 16-byte aligned (words_per_row % 4 == 0): vec4 loads.
//   bit 5      gate/up row pairs (ternary_gemv.wgsl's bit 5: two per-tensor scales, the pair's GLU
//              as the epilogue for epilogues 2 and 3).
//
// Bindings: w: one part of the weight: [rows_part][words_per_row] u32 codes, then the part's
// scales (at word `scale_word_offset`; group 0: one scale, else [rows_part][groups_per_row]); the
// buffer is a multiple of 16 bytes. xa, xf: see the prologue. y: [n_tokens][out_stride] f32; this
// part writes columns row0 .. row0 + rows_part.

// #import common
// #import ternary_epilogue
// #import ternary_params
// #import packed_dot
// #import nan_bits
// #import act_round

override LAYOUT: u32 = 0u;
override SCALE_TYPE: u32 = 0u;
override TPR: u32 = 32u;
override ACT4: u32 = 0u;
override DOT: u32 = 1u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> xa: array<u32>;
@group(0) @binding(3) var<storage, read> xf: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
// Per-row, per-group integer sums: rows_per_wg · groups_per_row ≤ GSUM (checked by the launcher).
const GSUM: u32 = 1024u;
// Activation words staged in workgroup memory (a longer row is read from `xa` directly; the
// fused prologue needs it staged: checked by the launcher).
const ASH: u32 = 2048u;
const SQRT7_BITS: u32 = 0x402953fdu; // f32 nearest √7
// The pair epilogue: each row's result, read by its pair partner.
var<workgroup> pres: array<f32, 64>; // rows per workgroup (256 / TPR, TPR ≥ 4)
var<workgroup> gsum: array<atomic<i32>, GSUM>;
var<workgroup> ash: array<u32, ASH>;
var<workgroup> partial: array<f32, 256>;
var<workgroup> lut: array<u32, 256>;
var<workgroup> amax_bits: atomic<u32>;
var<workgroup> xscale: f32;
var<private> staged: bool;
var<private> abase: u32;

fn wword(i: u32) -> u32 {
    let v = w[i >> 2u];
    return v[i & 3u];
}

fn aword(i: u32) -> u32 {
    if (staged) {
        return ash[i];
    }
    return xa[abase + i];
}

// Activation of column c (the per-element path).
fn act(c: u32) -> i32 {
    if (ACT4 == 1u) {
        let j = c & 7u;
        let word = aword(c >> 3u);
        return extractBits(bitcast<i32>(word), select(8u * (j - 4u) + 4u, 8u * j, j < 4u), 4u);
    }
    let word = aword(c >> 2u);
    return extractBits(bitcast<i32>(word), 8u * (c & 3u), 8u);
}

// Activation word aw (4 columns) as 4 int8 bytes, from packed int8 or packed int4 activations.
fn act_word(aw: u32) -> u32 {
    if (ACT4 == 1u) {
        let w4 = aword(aw >> 1u);
        return sext4(select(w4 >> 4u, w4, (aw & 1u) == 0u) & 0x0f0f0f0fu);
    }
    return aword(aw);
}

fn scale_at(i: u32) -> f32 {
    let o = p.scale_word_offset;
    if (SCALE_TYPE == 0u) {
        return bitcast<f32>(wword(o + i));
    }
    let word = wword(o + (i >> 1u));
    let h = (word >> (16u * (i & 1u))) & 0xffffu;
    if (SCALE_TYPE == 1u) {
        return f16_bits_to_f32(h);
    }
    return bitcast<f32>(h << 16u);
}

// Trit of element j (0..16 or 0..20) of code word cw (the per-element path of grouped scales).
fn trit(cw: u32, j: u32) -> i32 {
    if (LAYOUT == 0u) {
        return i32((cw >> (2u * j)) & 3u) - 1;
    }
    let l = lut[(cw >> (8u * (j / 5u))) & 0xffu];
    return i32((l >> (2u * (j % 5u))) & 3u) - 1;
}

// Σ trit · act over 4 codes (byte b of 2-bit codes) and activation word aw. trit = code − 1, so
// Σ trit·x = Σ code·x − Σ x: two packed int8 dot products. Columns past `cols` have zero
// activations (every quantizer pads with zeros), so no mask is needed.
fn byte_dot(b: u32, aw: u32) -> i32 {
    let a = act_word(aw);
    let codes = (b & 3u) | (((b >> 2u) & 3u) << 8u) | (((b >> 4u) & 3u) << 16u)
        | (((b >> 6u) & 3u) << 24u);
    return dot4(codes, a) - dot4(0x01010101u, a);
}

// Σ trit · act over the whole code word cw (columns from c0 = wi · elements per word).
fn word_dot(cw: u32, wi: u32) -> i32 {
    var acc = 0i;
    if (LAYOUT == 0u) {
        let aw0 = wi * 4u;
        for (var k = 0u; k < 4u; k = k + 1u) {
            acc = acc + byte_dot((cw >> (8u * k)) & 0xffu, aw0 + k);
        }
    } else {
        // 20 trits as 20 2-bit codes (trit + 1) through the byte table: codes 0..15 in lo,
        // 16..19 in hi; they pair with 5 activation words.
        let l0 = lut[cw & 0xffu];
        let l1 = lut[(cw >> 8u) & 0xffu];
        let l2 = lut[(cw >> 16u) & 0xffu];
        let l3 = lut[cw >> 24u];
        let lo = l0 | (l1 << 10u) | (l2 << 20u) | (l3 << 30u);
        let hi = l3 >> 2u;
        let aw0 = wi * 5u;
        for (var k = 0u; k < 4u; k = k + 1u) {
            acc = acc + byte_dot((lo >> (8u * k)) & 0xffu, aw0 + k);
        }
        acc = acc + byte_dot(hi, aw0 + 4u);
    }
    return acc;
}

// Accumulate code word wi (value cw) of the row into acc, flushing acc into the row's group
// sums when the group changes.
fn take_word(cw: u32, wi: u32, lrow: u32, acc: ptr<function, i32>, cur: ptr<function, u32>) {
    let epw = select(20u, 16u, LAYOUT == 0u);
    let gpr = p.groups_per_row;
    let c0 = wi * epw;
    if (c0 >= p.cols) {
        return;
    }
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
        *acc = *acc + word_dot(cw, wi);
    } else {
        for (var j = 0u; j < n; j = j + 1u) {
            let g = (c0 + j) / p.group;
            if (g != *cur) {
                atomicAdd(&gsum[lrow * gpr + *cur], *acc);
                *acc = 0;
                *cur = g;
            }
            *acc = *acc + trit(cw, j) * act(c0 + j);
        }
    }
}

// |RMSNorm(x)_c| bits of column c of the row at `base` (0 for NaN, which the absmax skips).
fn abs_bits(base: u32, c: u32, r: f32) -> u32 {
    let b = bitcast<u32>(bitcast<f32>(xa[base + c]) * r * xf[c]) & 0x7fffffffu;
    return select(0u, b, b <= 0x7f800000u);
}

// partial[0] ← Σ partial (halves 128 … 1); every invocation calls it.
fn tree_sum(lid: u32) {
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            partial[lid] = partial[lid] + partial[lid + st];
        }
        workgroupBarrier();
    }
}

// The fused prologue: RMSNorm of token tok's row, then INT8 absmax (ACT4 0) or INT4 absmean
// (ACT4 1) quantization into `ash`, the multiplier into `xscale`. Every invocation calls it.
fn norm_quant(lid: u32, tok: u32) {
    let n = p.cols;
    let base = tok * n;
    // The invocation's columns lid, lid + 256, … in increasing order (rmsnorm_quant.wgsl's
    // order, so the same bits), four independent loads per trip (scalars: private arrays spill to
    // local memory on some drivers, measured slower).
    var ss = 0.0;
    var c = lid;
    for (; c + 3u * WG < n; c = c + 4u * WG) {
        let v0 = bitcast<f32>(xa[base + c]);
        let v1 = bitcast<f32>(xa[base + c + WG]);
        let v2 = bitcast<f32>(xa[base + c + 2u * WG]);
        let v3 = bitcast<f32>(xa[base + c + 3u * WG]);
        ss = ss + v0 * v0;
        ss = ss + v1 * v1;
        ss = ss + v2 * v2;
        ss = ss + v3 * v3;
    }
    for (; c < n; c = c + WG) {
        let v = bitcast<f32>(xa[base + c]);
        ss = ss + v * v;
    }
    partial[lid] = ss;
    tree_sum(lid);
    let r = 1.0 / sqrt(partial[0] / f32(n) + p.eps);
    workgroupBarrier();
    var s = 0.0;
    if (ACT4 == 0u) {
        var m = 0u;
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
        atomicMax(&amax_bits, m);
        workgroupBarrier();
        s = div_rn(127.0, max(bitcast<f32>(atomicLoad(&amax_bits)), 1e-5));
        for (var wd = lid; wd < p.act_stride; wd = wd + WG) {
            var packed = 0u;
            for (var k = 0u; k < 4u; k = k + 1u) {
                let c = wd * 4u + k;
                var v = 0i;
                if (c < n) {
                    v = quant(bitcast<f32>(xa[base + c]) * r * xf[c], s, -128.0, 127.0);
                }
                packed = packed | ((bitcast<u32>(v) & 0xffu) << (8u * k));
            }
            ash[wd] = packed;
        }
    } else {
        var sa = 0.0;
        var c = lid;
        for (; c + 3u * WG < n; c = c + 4u * WG) {
            let a0 = abs(bitcast<f32>(xa[base + c]) * r * xf[c]);
            let a1 = abs(bitcast<f32>(xa[base + c + WG]) * r * xf[c + WG]);
            let a2 = abs(bitcast<f32>(xa[base + c + 2u * WG]) * r * xf[c + 2u * WG]);
            let a3 = abs(bitcast<f32>(xa[base + c + 3u * WG]) * r * xf[c + 3u * WG]);
            sa = sa + a0;
            sa = sa + a1;
            sa = sa + a2;
            sa = sa + a3;
        }
        for (; c < n; c = c + WG) {
            sa = sa + abs(bitcast<f32>(xa[base + c]) * r * xf[c]);
        }
        partial[lid] = sa;
        tree_sum(lid);
        let beta = div_rn(partial[0], f32(max(n, 1u)));
        s = div_rn(bitcast<f32>(SQRT7_BITS), max(beta, 1e-5));
        for (var wd = lid; wd < p.act_stride; wd = wd + WG) {
            var packed = 0u;
            for (var j = 0u; j < 8u; j = j + 1u) {
                let c = 8u * wd + j;
                var v = 0i;
                if (c < n) {
                    v = quant(bitcast<f32>(xa[base + c]) * r * xf[c], s, -8.0, 7.0);
                }
                let sh = select(8u * (j - 4u) + 4u, 8u * j, j < 4u);
                packed = packed | ((bitcast<u32>(v) & 0xfu) << sh);
            }
            ash[wd] = packed;
        }
    }
    if (lid == 0u) {
        xscale = s;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let rpw = WG / TPR;
    let lrow = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * rpw + lrow;
    let tok = min(wg.y, max(p.n_tokens, 1u) - 1u);
    let tok_ok = wg.y < p.n_tokens;
    let gpr = p.groups_per_row;
    let pro = p.mode & 3u;
    let epi = (p.mode >> 2u) & 3u;
    let vec_rows = ((p.mode >> 4u) & 1u) == 1u;
    for (var i = lid; i < rpw * gpr; i = i + WG) {
        atomicStore(&gsum[i], 0);
    }
    if (LAYOUT == 1u) {
        // byte → its 5 trits as 2-bit codes (trit + 1) at bits 2m
        var pw = 1u;
        var l = 0u;
        for (var m = 0u; m < 5u; m = m + 1u) {
            l = l | (((((lid * pw) & 0xffu) * 3u) >> 8u) << (2u * m));
            pw = pw * 3u;
        }
        lut[lid] = l;
    }
    if (lid == 0u) {
        atomicStore(&amax_bits, 0u);
    }
    abase = tok * p.act_stride;
    staged = p.act_stride <= ASH;
    if (pro == 1u) {
        norm_quant(lid, tok);
    } else if (staged) {
        for (var i = lid; i < p.act_stride; i = i + WG) {
            ash[i] = xa[abase + i];
        }
        if (lid == 0u) {
            xscale = xf[tok];
        }
    }
    workgroupBarrier();
    if (row < p.rows && tok_ok) {
        let wpr = p.words_per_row;
        let wbase = row * wpr;
        var acc = 0i;
        var cur = 0u; // group that acc belongs to
        if (vec_rows) {
            let nv = wpr >> 2u;
            let vbase = wbase >> 2u;
            var u = lane;
            for (; u + TPR < nv; u = u + 2u * TPR) {
                let v0 = w[vbase + u];
                let v1 = w[vbase + u + TPR];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    take_word(v0[k], 4u * u + k, lrow, &acc, &cur);
                }
                for (var k = 0u; k < 4u; k = k + 1u) {
                    take_word(v1[k], 4u * (u + TPR) + k, lrow, &acc, &cur);
                }
            }
            if (u < nv) {
                let v0 = w[vbase + u];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    take_word(v0[k], 4u * u + k, lrow, &acc, &cur);
                }
            }
        } else {
            for (var wi = lane; wi < wpr; wi = wi + TPR) {
                take_word(wword(wbase + wi), wi, lrow, &acc, &cur);
            }
        }
        atomicAdd(&gsum[lrow * gpr + cur], acc);
    }
    workgroupBarrier();
    // The row's lanes turn the group sums into products acc_g · scale_g in parallel, stored back
    // as f32 bits; then lane 0 adds them in the reference's order: sum = 0.0, then + product_g.
    if (row < p.rows && tok_ok) {
        for (var g = lane; g < gpr; g = g + TPR) {
            let si = select(row * gpr + g, pair_scale(row), p.group == 0u);
            let prod = f32(atomicLoad(&gsum[lrow * gpr + g])) * scale_at(si);
            atomicStore(&gsum[lrow * gpr + g], bitcast<i32>(prod));
        }
    }
    workgroupBarrier();
    var res = 0.0;
    if (lane == 0u && row < p.rows && tok_ok) {
        var sum = 0.0;
        for (var g = 0u; g < gpr; g = g + 1u) {
            sum = sum + bitcast<f32>(atomicLoad(&gsum[lrow * gpr + g]));
        }
        var s = 0.0;
        if (pro == 1u || staged) {
            s = xscale;
        } else {
            s = xf[tok];
        }
        res = div_rn(sum, s);
        pres[lrow] = res;
    }
    if (((p.mode >> 5u) & 1u) == 1u) {
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows && tok_ok) {
        epilogue(epi, row, tok, res, lrow);
    }
}
