// Ternary GEMM on cooperative matrices (tensor cores; `GemmTile::Coop`): the prefill kernel of
// 2bit weights with one scale group (per-tensor scales, gate/up pairs by mode bit 5) or, GROUPED,
// groups of a multiple of 32 columns (TQ2_0's 256). Same operands, output and bits as
// ternary_gemm_t128.wgsl (read its header): y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} ·
// q_t[c]) / s_t.
//
// Why it is exact: trits and INT8 (or INT4) activation codes are exact in f16, each product is
// exact in f32, and every partial sum is an integer of magnitude ≤ cols · 127 < 2^24 (matmul.rs
// refuses more columns), so the f32 accumulator ends on the same integer as the reference's i32
// sum whatever order the matrix unit adds in. The epilogue is then the reference's for one scale
// group: `sum = 0.0 + f32(acc) · scale`, `div_rn(sum, s_t)`. GROUPED: a group ends on a K step's
// edge; there each fragment goes through the staging block into the lanes' f32 sums, in
// increasing group order `sum = sum + f32(acc_g) · scale_g` from 0.0 (the reference's
// operations), the accumulators restart from 0, and the end divides once: `div_rn(sum, s_t)`.
//
// A workgroup is 4 subgroups of 32 invocations (the context takes this path only where the
// adapter's subgroups are exactly 32 wide) and computes 64 rows × 64 tokens: subgroup s the rows
// 32 · (s % 2) .. + 32 × tokens 32 · (s / 2) .. + 32 as 2 × 2 fragments `coop_mat16x16` (f16
// inputs A = trits [row][k], B = codes [k][token], f32 accumulators). A K step is KS = 32
// columns: one 2-bit code word (16 columns) of a row per invocation and the codes of the 64 tokens
// (INT8: 4 words per invocation, INT4: 2) are widened to f16 in workgroup memory (one vec4 store
// per 4 columns), the next
// step's words loaded before the current step's products (software pipeline). The results go
// through a 16 × 16 f32 staging block per subgroup to the scaled, bounds-checked stores.
//
// Override constants: SCALE_TYPE (0 f32, 1 f16, 2 bf16), ACT4 (0 INT8, 1 INT4), GROUPED (0 one
// scale group, 1 groups of a multiple of 32 columns), DOT (unused here; ternary_ops' import
// needs it). Bindings as ternary_gemm.wgsl. Grid: x = 64-row tiles of
// the part, y = 64-token tiles.

enable f16;
enable wgpu_cooperative_matrix;

// #import common
// #import ternary_ops
// #import ternary_params

override SCALE_TYPE: u32 = 0u;
override ACT4: u32 = 0u;
override GROUPED: u32 = 0u;
override DOT: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<u32>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const TR: u32 = 64u; // rows per tile
const TT: u32 = 64u; // tokens per tile
const KS: u32 = 32u; // columns per K step
// Row stride of the staged tiles in vec4<f16> (KS / 4 + 2: 80 bytes, 16-byte aligned). The tiles
// are arrays of vec4<f16> so that each widened word is one 8-byte store; `coopLoad` then counts
// its offset and stride in vec4s (SPIR-V: in units of the pointer's type).
const LDV: u32 = 10u;

// Trits [row][k] and codes [token][k], f16, LDV vec4s apart: 2 × 5 KiB.
var<workgroup> wa: array<vec4<f16>, 640>;
var<workgroup> xb: array<vec4<f16>, 640>;
// One 16 × 16 f32 block per subgroup for the epilogue (column-major: [token][row]).
var<workgroup> cs: array<f32, 1024>;
// GROUPED: the lane's f32 sums of the groups flushed so far: fragment f's element lane + 32 m at
// [8 f + m].
var<private> sums: array<f32, 32>;

// Code word `q` (0 or 1) of K step s of tile row `r` (trit 0 = code 1 past the row or the part).
fn load_code(row: u32, s: u32, q: u32) -> u32 {
    let wi = s * 2u + q;
    if (row < p.rows && wi < p.words_per_row) {
        return w[row * p.words_per_row + wi];
    }
    return 0x55555555u;
}

// Activation word `j` of K step s of token `tok` (INT8: 8 words of 4 codes per step; INT4: 4 of
// 8), zero past the data.
fn load_act(tok: u32, s: u32, j: u32) -> u32 {
    let per = select(8u, 4u, ACT4 == 1u);
    let qi = s * per + j;
    if (tok < p.n_tokens && qi < p.act_stride) {
        return xq[tok * p.act_stride + qi];
    }
    return 0u;
}

// Four int8 bytes of `v` to f16 at xb[at].
fn put4(at: u32, v: u32) {
    xb[at] = vec4<f16>(unpack4xI8(v));
}

// GROUPED: the end of group g for fragment f (rows row0 .. + 16 of the part's tile): through the
// staging block, sums[8 f + m] += f32(acc) · scale_g of element lane + 32 m's row.
fn flush(m: coop_mat16x16<f32, C>, f: u32, g: u32, base: u32, lane: u32, row0: u32) {
    let st = 16u;
    coopStore(m, &cs[base], st);
    workgroupBarrier();
    for (var k = 0u; k < 8u; k = k + 1u) {
        let e = lane + 32u * k;
        sums[8u * f + k] = sums[8u * f + k] + cs[base + e] * group_scale(row0 + e % 16u, g);
    }
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wg.x * TR;
    let t0 = wg.y * TT;
    let n_steps = (p.cols + KS - 1u) / KS;
    // Staging roles: invocation lid widens code word lid % 2 of tile row lid / 2, and the
    // activations of token lid / 2 (INT8: words 4 · (lid % 2) .. + 4; INT4: 2 · (lid % 2) .. + 2).
    let crow = lid / 2u;
    let cq = lid % 2u;
    let atok = lid / 2u;
    let ah = lid % 2u;
    var c = load_code(r0 + crow, 0u, cq);
    var a0 = 0u;
    var a1 = 0u;
    var a2 = 0u;
    var a3 = 0u;
    if (ACT4 == 1u) {
        a0 = load_act(t0 + atok, 0u, 2u * ah);
        a1 = load_act(t0 + atok, 0u, 2u * ah + 1u);
    } else {
        a0 = load_act(t0 + atok, 0u, 4u * ah);
        a1 = load_act(t0 + atok, 0u, 4u * ah + 1u);
        a2 = load_act(t0 + atok, 0u, 4u * ah + 2u);
        a3 = load_act(t0 + atok, 0u, 4u * ah + 3u);
    }
    // The subgroup's fragments: rows rb, rb + 16; tokens tb, tb + 16 (all offsets `let`s: naga's
    // SPIR-V wants each coop pointer from a plain index).
    let rb = 32u * (sg % 2u);
    let tb = 32u * (sg / 2u);
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    let base = sg * 256u;
    // GROUPED: K steps per scale group, the current group
    let spg = max(p.group / KS, 1u);
    var g = 0u;
    for (var s = 0u; s < n_steps; s = s + 1u) {
        if (GROUPED == 1u && s > 0u && s % spg == 0u) {
            flush(c00, 0u, g, base, lane, r0 + rb);
            flush(c01, 1u, g, base, lane, r0 + rb);
            flush(c10, 2u, g, base, lane, r0 + rb + 16u);
            flush(c11, 3u, g, base, lane, r0 + rb + 16u);
            c00 = coop_mat16x16<f32, C>();
            c01 = coop_mat16x16<f32, C>();
            c10 = coop_mat16x16<f32, C>();
            c11 = coop_mat16x16<f32, C>();
            g = g + 1u;
        }
        // Widen: 16 trits of the code word, 16 (INT8) or 16 (INT4) codes of the token.
        let wrow = crow * LDV + cq * 4u;
        wa[wrow] = vec4<f16>(unpack4xI8(trits2(c, 0u)));
        wa[wrow + 1u] = vec4<f16>(unpack4xI8(trits2(c, 1u)));
        wa[wrow + 2u] = vec4<f16>(unpack4xI8(trits2(c, 2u)));
        wa[wrow + 3u] = vec4<f16>(unpack4xI8(trits2(c, 3u)));
        let xrow = atok * LDV + ah * 4u;
        if (ACT4 == 1u) {
            // Words of 8 columns: low nibbles columns 0-3, high nibbles 4-7.
            put4(xrow, sext4(a0 & 0x0f0f0f0fu));
            put4(xrow + 1u, sext4((a0 >> 4u) & 0x0f0f0f0fu));
            put4(xrow + 2u, sext4(a1 & 0x0f0f0f0fu));
            put4(xrow + 3u, sext4((a1 >> 4u) & 0x0f0f0f0fu));
        } else {
            put4(xrow, a0);
            put4(xrow + 1u, a1);
            put4(xrow + 2u, a2);
            put4(xrow + 3u, a3);
        }
        workgroupBarrier();
        if (s + 1u < n_steps) {
            c = load_code(r0 + crow, s + 1u, cq);
            if (ACT4 == 1u) {
                a0 = load_act(t0 + atok, s + 1u, 2u * ah);
                a1 = load_act(t0 + atok, s + 1u, 2u * ah + 1u);
            } else {
                a0 = load_act(t0 + atok, s + 1u, 4u * ah);
                a1 = load_act(t0 + atok, s + 1u, 4u * ah + 1u);
                a2 = load_act(t0 + atok, s + 1u, 4u * ah + 2u);
                a3 = load_act(t0 + atok, s + 1u, 4u * ah + 3u);
            }
        }
        for (var kv = 0u; kv < KS / 4u; kv = kv + 4u) {
            let ia0 = rb * LDV + kv;
            let ia1 = (rb + 16u) * LDV + kv;
            let ib0 = tb * LDV + kv;
            let ib1 = (tb + 16u) * LDV + kv;
            let m0 = coopLoadT<coop_mat16x16<f16, A>>(&wa[ia0], LDV);
            let m1 = coopLoadT<coop_mat16x16<f16, A>>(&wa[ia1], LDV);
            let n0 = coopLoad<coop_mat16x16<f16, B>>(&xb[ib0], LDV);
            let n1 = coopLoad<coop_mat16x16<f16, B>>(&xb[ib1], LDV);
            c00 = coopMultiplyAdd(m0, n0, c00);
            c01 = coopMultiplyAdd(m0, n1, c01);
            c10 = coopMultiplyAdd(m1, n0, c10);
            c11 = coopMultiplyAdd(m1, n1, c11);
        }
        workgroupBarrier();
    }

    if (GROUPED == 1u) {
        flush(c00, 0u, g, base, lane, r0 + rb);
        flush(c01, 1u, g, base, lane, r0 + rb);
        flush(c10, 2u, g, base, lane, r0 + rb + 16u);
        flush(c11, 3u, g, base, lane, r0 + rb + 16u);
        for (var f = 0u; f < 4u; f = f + 1u) {
            for (var m = 0u; m < 8u; m = m + 1u) {
                let e = lane + 32u * m;
                let row = r0 + rb + 16u * (f / 2u) + e % 16u;
                let t = t0 + tb + 16u * (f % 2u) + e / 16u;
                if (row < p.rows && t < p.n_tokens) {
                    y[t * p.out_stride + p.row0 + row] = div_rn(sums[8u * f + m], xs[t]);
                }
            }
        }
        return;
    }
    // Epilogue, one fragment at a time through the subgroup's staging block: element (r, t) at
    // cs[base + 16 t + r]; lane l stores elements l + 32 m.
    for (var f = 0u; f < 4u; f = f + 1u) {
        let fr = f / 2u;
        let ft = f % 2u;
        var m = c00;
        if (f == 1u) {
            m = c01;
        } else if (f == 2u) {
            m = c10;
        } else if (f == 3u) {
            m = c11;
        }
        let st = 16u;
        coopStore(m, &cs[base], st);
        workgroupBarrier();
        for (var e = lane; e < 256u; e = e + 32u) {
            let row = r0 + rb + 16u * fr + e % 16u;
            let t = t0 + tb + 16u * ft + e / 16u;
            if (row < p.rows && t < p.n_tokens) {
                let sum = 0.0 + cs[base + e] * tensor_scale(row);
                y[t * p.out_stride + p.row0 + row] = div_rn(sum, xs[t]);
            }
        }
        workgroupBarrier();
    }
}
