// Tiled ternary GEMM with 4-row × 8-token micro-tiles: the prefill kernel of per-tensor-scale 2bit
// weights (group 0, BitNet b1.58 2B4T). Same operands, output and bits as ternary_gemm.wgsl (read
// its header): y[t][r] = (scale_r · Σ_c trit_{r,c} · q_t[c]) / s_t.
//
// A workgroup of WG = 16 · TG invocations computes 64 rows × TT = 8 · TG tokens (WG 256: 64 × 128,
// `GemmTile::Tall`; WG 128: 64 × 64, `GemmTile::TallHalf`, twice the workgroups for the same
// shape). Invocation (tr, tt) = (lid % 16, lid / 16) accumulates rows tr + 16 i (i < 4) × tokens
// tt + TG · j (j < 8): per 16-column sub-step 4 + 8 vec4 workgroup-memory reads feed 128 dot4
// (ternary_gemm.wgsl's 64 × 64 tile: 8 reads, 64 dot4). A K step is 4 code words (64 columns) of
// each row: 4 KiB of int8 trits plus TT · 64 B of activations in workgroup memory (≤ 12 KiB;
// WebGPU guarantees 16352 B). The next step's global loads are issued before the current step's
// products (software pipeline, as ternary_gemm.wgsl). H100, 512 tokens
// (docs/bench/h-gemm-2026-11-24): 13824 × 2560 gate/up pairs 660 µs with WG 256 (55 TOPS; the
// 64 × 64 tile: 800 µs), 2560 × 6912 392 µs with WG 128 (46 TOPS; 446 µs); WG 256 loses where it
// leaves too few workgroups.
//
// LAYOUT 2bit, and one scale group (group 0: one scale per tensor, or two with gate/up pairs:
// mode bit 5) or groups of a multiple of 64 columns (GROUPED = 1: TQ2_0's 256-column blocks);
// matmul.rs sends every other weight to ternary_gemm.wgsl. With one scale group the i32 sums
// are exact and order-free, and the f32 work is the reference's for one group:
// `sum = 0.0 + f32(acc) · scale`, then `div_rn(sum, s_t)`, so no per-group flush. GROUPED: a
// group ends on a K step's edge; there, in increasing group order, `sum = sum + f32(acc_g) ·
// scale_g` from 0.0 and acc = 0 (ternary_gemm.wgsl's flush, the reference's operations), then
// one `div_rn(sum, s_t)` (32 more registers per invocation: a variant of its own).
//
// Override constants (as ternary_gemm.wgsl):
//   SCALE_TYPE  0 = f32, 1 = f16, 2 = bf16
//   ACT4        0 = INT8 activations; 1 = INT4 (a4.8), expanded to int8 when staged
//   DOT         1 = `dot4I8Packed`, 0 = the plain byte-by-byte sum
//   WG          invocations per workgroup: 256 (TT = 128) or 128 (TT = 64)
//   GROUPED     0 = one scale group; 1 = groups of a multiple of 64 columns
// Bindings as ternary_gemm.wgsl. Grid: x = 64-row tiles of the part, y = TT-token tiles.

// #import common
// #import ternary_ops
// #import ternary_params

override SCALE_TYPE: u32 = 0u;
override ACT4: u32 = 0u;
override DOT: u32 = 1u;
override WG: u32 = 256u;
override GROUPED: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const TR: u32 = 64u; // rows per tile
const CW: u32 = 4u; // code words per row per K step = 16-column sub-steps per step
const AB: u32 = 256u; // CW · TR: start of the activations in `tile`
override TG: u32 = WG / 16u; // token groups: tokens tt + TG · j
override TT: u32 = 8u * TG; // tokens per tile

// Trits [q][row] at 0 .. 256, activations [q][token] at 256 .. 256 + 4 · TT (sized for TT = 128:
// 12 KiB; WG 128 uses 8 KiB of it).
var<workgroup> tile: array<vec4<u32>, 768>;

// Micro-tile: rows tr + 16 i (component i), tokens tt + TG · j (acc_j). Vectors with constant
// components stay in registers (ternary_gemm.wgsl).
var<private> acc0: vec4<i32>;
var<private> acc1: vec4<i32>;
var<private> acc2: vec4<i32>;
var<private> acc3: vec4<i32>;
var<private> acc4: vec4<i32>;
var<private> acc5: vec4<i32>;
var<private> acc6: vec4<i32>;
var<private> acc7: vec4<i32>;
// GROUPED: the f32 sums of the groups flushed so far (same layout as acc_j).
var<private> sum0: vec4<f32>;
var<private> sum1: vec4<f32>;
var<private> sum2: vec4<f32>;
var<private> sum3: vec4<f32>;
var<private> sum4: vec4<f32>;
var<private> sum5: vec4<f32>;
var<private> sum6: vec4<f32>;
var<private> sum7: vec4<f32>;

// GROUPED: the end of group g for the invocation's rows (row, row + 16, + 32, + 48): sum += f32(acc)
// · scale per component (one f32 multiply and one add, as the reference), acc = 0.
fn flush(g: u32, row: u32) {
    let sc = vec4<f32>(group_scale(row, g), group_scale(row + 16u, g), group_scale(row + 32u, g),
        group_scale(row + 48u, g));
    sum0 = sum0 + vec4<f32>(acc0) * sc;
    sum1 = sum1 + vec4<f32>(acc1) * sc;
    sum2 = sum2 + vec4<f32>(acc2) * sc;
    sum3 = sum3 + vec4<f32>(acc3) * sc;
    sum4 = sum4 + vec4<f32>(acc4) * sc;
    sum5 = sum5 + vec4<f32>(acc5) * sc;
    sum6 = sum6 + vec4<f32>(acc6) * sc;
    sum7 = sum7 + vec4<f32>(acc7) * sc;
    acc0 = vec4<i32>(0);
    acc1 = vec4<i32>(0);
    acc2 = vec4<i32>(0);
    acc3 = vec4<i32>(0);
    acc4 = vec4<i32>(0);
    acc5 = vec4<i32>(0);
    acc6 = vec4<i32>(0);
    acc7 = vec4<i32>(0);
}

// GROUPED: token t's outputs of the invocation's rows from their f32 sums.
fn store_sums(t: u32, row: u32, sum: vec4<f32>) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (t < p.n_tokens && row + 16u * i < p.rows) {
            y[t * p.out_stride + p.row0 + row + 16u * i] = div_rn(sum[i], xs[t]);
        }
    }
}

// acc + the 16-column dot product, as one chain from the accumulator (a DP4A with its addend
// per word; i32 sums are exact, so the order is free).
fn dot16(acc: i32, wv: vec4<u32>, a: vec4<u32>) -> i32 {
    return acc + dot4(wv.x, a.x) + dot4(wv.y, a.y) + dot4(wv.z, a.z) + dot4(wv.w, a.w);
}

// One token's 16 columns into its 4 rows' accumulators.
fn mac(acc: vec4<i32>, w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>,
    a: vec4<u32>) -> vec4<i32> {
    return vec4<i32>(dot16(acc.x, w0, a), dot16(acc.y, w1, a), dot16(acc.z, w2, a),
        dot16(acc.w, w3, a));
}

// Code word `it` (< TR · CW) of step s: tile row it / CW, word it % CW (trits 0 past the row or
// the part).
fn load_code(r0: u32, s: u32, it: u32) -> u32 {
    let row = r0 + it / CW;
    let wi = s * CW + it % CW;
    if (row < p.rows && wi < p.words_per_row) {
        return w[row * p.words_per_row + wi];
    }
    return 0x55555555u; // code 1 = trit 0
}

fn store_code(it: u32, c: u32) {
    tile[(it % CW) * TR + it / CW] =
        vec4<u32>(trits2(c, 0u), trits2(c, 1u), trits2(c, 2u), trits2(c, 3u));
}

// Activation vec4 `it` of step s (INT8: token it / 4, vec4 it % 4; INT4: token it / 2, vec4 of
// 32 columns it % 2), zero past the data.
fn load_act(t0: u32, s: u32, it: u32) -> vec4<u32> {
    let per = select(CW, CW / 2u, ACT4 == 1u);
    let tok = t0 + it / per;
    let qi = s * per + it % per;
    let astride4 = p.act_stride / 4u;
    if (it < TT * per && tok < p.n_tokens && qi < astride4) {
        return xq[tok * astride4 + qi];
    }
    return vec4<u32>(0u);
}

fn store_act(it: u32, v: vec4<u32>) {
    if (ACT4 == 1u) {
        if (it < TT * 2u) {
            // Words of 8 columns: low nibbles are columns 0-3, high nibbles 4-7 of each word.
            let lo = vec4<u32>(sext4(v.x & 0x0f0f0f0fu), sext4((v.x >> 4u) & 0x0f0f0f0fu),
                sext4(v.y & 0x0f0f0f0fu), sext4((v.y >> 4u) & 0x0f0f0f0fu));
            let hi = vec4<u32>(sext4(v.z & 0x0f0f0f0fu), sext4((v.z >> 4u) & 0x0f0f0f0fu),
                sext4(v.w & 0x0f0f0f0fu), sext4((v.w >> 4u) & 0x0f0f0f0fu));
            let q = 2u * (it % 2u);
            let tok = it / 2u;
            tile[AB + q * TT + tok] = lo;
            tile[AB + (q + 1u) * TT + tok] = hi;
        }
        return;
    }
    tile[AB + (it % CW) * TT + it / CW] = v;
}

fn store_y(t: u32, row: u32, a: i32, sc: f32) {
    if (t < p.n_tokens) {
        let sum = 0.0 + f32(a) * sc;
        y[t * p.out_stride + p.row0 + row] = div_rn(sum, xs[t]);
    }
}

// Token t's outputs of the invocation's rows row + 16 i (those below p.rows).
fn store_rows(t: u32, row: u32, a: vec4<i32>, sc: vec4<f32>) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (row + 16u * i < p.rows) {
            store_y(t, row + 16u * i, a[i], sc[i]);
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * TR;
    let t0 = wg.y * TT;
    let tr = lid % 16u;
    let tt = lid / 16u;
    let n_steps = (p.cols + 16u * CW - 1u) / (16u * CW);
    acc0 = vec4<i32>(0);
    acc1 = vec4<i32>(0);
    acc2 = vec4<i32>(0);
    acc3 = vec4<i32>(0);
    acc4 = vec4<i32>(0);
    acc5 = vec4<i32>(0);
    acc6 = vec4<i32>(0);
    acc7 = vec4<i32>(0);
    sum0 = vec4<f32>(0.0);
    sum1 = vec4<f32>(0.0);
    sum2 = vec4<f32>(0.0);
    sum3 = vec4<f32>(0.0);
    sum4 = vec4<f32>(0.0);
    sum5 = vec4<f32>(0.0);
    sum6 = vec4<f32>(0.0);
    sum7 = vec4<f32>(0.0);
    // GROUPED: K steps per scale group, the current group
    let spg = max(p.group / (16u * CW), 1u);
    var g = 0u;

    // Per invocation and step: code words lid (and lid + 128 with WG 128: TR · CW = 256),
    // activation vec4s lid and lid + WG (TT · CW = 2 · WG; INT4: WG, lid only).
    var c_a = load_code(r0, 0u, lid);
    var c_b = 0x55555555u;
    if (WG == 128u) {
        c_b = load_code(r0, 0u, lid + WG);
    }
    var x_a = load_act(t0, 0u, lid);
    var x_b = load_act(t0, 0u, lid + WG);
    for (var s = 0u; s < n_steps; s = s + 1u) {
        store_code(lid, c_a);
        if (WG == 128u) {
            store_code(lid + WG, c_b);
        }
        store_act(lid, x_a);
        if (ACT4 == 0u) {
            store_act(lid + WG, x_b);
        }
        workgroupBarrier();
        if (s + 1u < n_steps) {
            c_a = load_code(r0, s + 1u, lid);
            if (WG == 128u) {
                c_b = load_code(r0, s + 1u, lid + WG);
            }
            x_a = load_act(t0, s + 1u, lid);
            if (ACT4 == 0u) {
                x_b = load_act(t0, s + 1u, lid + WG);
            }
        }
        if (GROUPED == 1u && s > 0u && s % spg == 0u) {
            flush(g, r0 + tr);
            g = g + 1u;
        }
        for (var q = 0u; q < CW; q = q + 1u) {
            let wb = q * TR + tr;
            let w0 = tile[wb];
            let w1 = tile[wb + 16u];
            let w2 = tile[wb + 32u];
            let w3 = tile[wb + 48u];
            let abq = AB + q * TT + tt;
            let a0 = tile[abq];
            acc0 = mac(acc0, w0, w1, w2, w3, a0);
            let a1 = tile[abq + 1u * TG];
            acc1 = mac(acc1, w0, w1, w2, w3, a1);
            let a2 = tile[abq + 2u * TG];
            acc2 = mac(acc2, w0, w1, w2, w3, a2);
            let a3 = tile[abq + 3u * TG];
            acc3 = mac(acc3, w0, w1, w2, w3, a3);
            let a4 = tile[abq + 4u * TG];
            acc4 = mac(acc4, w0, w1, w2, w3, a4);
            let a5 = tile[abq + 5u * TG];
            acc5 = mac(acc5, w0, w1, w2, w3, a5);
            let a6 = tile[abq + 6u * TG];
            acc6 = mac(acc6, w0, w1, w2, w3, a6);
            let a7 = tile[abq + 7u * TG];
            acc7 = mac(acc7, w0, w1, w2, w3, a7);
        }
        workgroupBarrier();
    }

    let row = r0 + tr;
    if (GROUPED == 1u) {
        flush(g, row);
        let t = t0 + tt;
        store_sums(t, row, sum0);
        store_sums(t + TG, row, sum1);
        store_sums(t + 2u * TG, row, sum2);
        store_sums(t + 3u * TG, row, sum3);
        store_sums(t + 4u * TG, row, sum4);
        store_sums(t + 5u * TG, row, sum5);
        store_sums(t + 6u * TG, row, sum6);
        store_sums(t + 7u * TG, row, sum7);
        return;
    }
    let sc = vec4<f32>(tensor_scale(row), tensor_scale(row + 16u), tensor_scale(row + 32u),
        tensor_scale(row + 48u));
    if (row < p.rows) {
        let t = t0 + tt;
        store_rows(t, row, acc0, sc);
        store_rows(t + TG, row, acc1, sc);
        store_rows(t + 2u * TG, row, acc2, sc);
        store_rows(t + 3u * TG, row, acc3, sc);
        store_rows(t + 4u * TG, row, acc4, sc);
        store_rows(t + 5u * TG, row, acc5, sc);
        store_rows(t + 6u * TG, row, acc6, sc);
        store_rows(t + 7u * TG, row, acc7, sc);
    }
}
