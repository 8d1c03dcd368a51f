// ggml block GEMV with f32 activations: y[t][r] = Σ_c dequant(W)[r][c] · x[t][c] for Q8_0, Q4_0,
// Q4_1 and Q6_K rows kept exactly as llama.cpp stores them (runtime/format/src/ggml.rs).
// Dequantization as ggml: Q8_0 x = q·d; Q4_0 x = (q − 8)·d; Q4_1 x = q·d + m (byte j of qs: low
// nibble = element j, high nibble = element j + 16); Q6_K (256-element super-blocks of 210 bytes:
// ql[128], qh[64], scales[16] i8, d f16) x = (d·sc)·q.
//
// Load pattern (the float GEMV's): 8 rows per workgroup, 32 invocations per row striding over
// the row's units, then a shared-memory reduction (no subgroups: downlevel). Blocks are
// byte-packed with no padding (34, 18, 20, 210 bytes), so a field may start at any byte: two
// shifted aligned words make each word there. Activations are read as vec4 from the storage
// buffer (staging the row in workgroup memory measured slower on the H100: docs/measurements.md,
// h-ggml).
// * Q8_0 / Q4_0 / Q4_1: a unit is a 32-element block read as 4-word vectors (`load4`), two units
//   in flight per step.
// * Q6_K: a unit is an eighth of a super-block (32 columns): 8 consecutive bytes of each of its
//   two ql runs and of its qh run, its half's 8 scales, d (`load_q6`; 9 aligned loads, 13 where
//   the super-block starts 2 bytes past a word), so consecutive lanes read consecutive 8-byte
//   pieces. Each step loads the next two units before it sums the current two.
// f32 accumulation in a different order than the reference's `dot_f32` (the block's — Q6_K: the
// scale group's — scale is applied to its sum): NMSE against it ~1e-14, the parity bound is 1e-6.
//
// Each format's dequantize-and-dot is its own function (`dot_q8_0`, `dot_q4`, `dot_q6_k`);
// `unit_dot` picks one for the 32-element blocks, `main` strides and reduces.
//
// The fused norm prologue (NORM = 1, issue 15): x holds the raw residual rows and the GEMV
// multiplies RMSNorm(x) · nw, computing the norm itself instead of reading rmsnorm.wgsl's output
// (one dispatch fewer per norm at decode). Every workgroup of a token first computes the token's
// multiplier with rmsnorm.wgsl's own code (rms_scale.wgsl, imported by both), then reads
// x · r · nw where the plain kernel reads x: the same f32 activations as the separate pass. These
// variants run TPR = 8 invocations per row (32 rows per workgroup), so four times fewer
// workgroups repeat the norm (on lavapipe the TPR = 32 form decoded SmolLM2 2.6× slower than the
// separate pass); their sums are therefore added in another order than the plain kernel's
// (NMSE ~1e-15 between the two). Every workgroup re-reads the row from cache (a model's width, a
// few KiB), so this is for the layers' GEMVs, not for a vocabulary-sized head.
//
// Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K (QTYPE 4..10): a unit is 32 columns, two units per
// step as Q8_0. Q5_0/Q5_1 (`dot_q5`) and Q4_K/Q5_K (`dot_q45_k`: a unit is one sub-block, so one
// scale and one min) sum q·x and x, then apply the scale and min once, as Q4_0/Q4_1; the others
// dequantize 4 at a time with ggml_kquants.wgsl's kq4 (`dot_kq`).
//
// Override constants: QTYPE 0 = Q8_0, 1 = Q4_0, 2 = Q4_1, 3 = Q6_K, 4..10 = ggml_kquants.wgsl's; TPR invocations per row
// (divides 256); NORM 1 = the fused norm prologue.
// Bindings: w [rows_part] rows of blocks (bytes; blocks_per_row = cols / 32 units); x [n_tokens][cols] f32
//           (read as vec4: cols is a multiple of 32); y [n_tokens][out_stride] f32, this part
//           writes columns row0 .. row0 + rows; nw [cols] f32 the norm weight (NORM = 1; the
//           plain variants are given any buffer, which they do not read).

// #import common
// #import rms_scale
// #import byte_load
// #import ggml_common
// #import ggml_kquants

override QTYPE: u32 = 0u;
override TPR: u32 = 32u;
override NORM: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> nw: array<vec4<f32>>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, 256>;
// NORM = 1: the token's RMSNorm multiplier and the vec4 index of its row in x.
var<private> nscale: f32;
var<private> xrow0: u32;

// Element i of x as f32 (rms_scale.wgsl, imported, reads the row through it).
fn x_at(i: u32) -> f32 {
    return x[i >> 2u][i & 3u];
}

// A runtime zero the compiler cannot see through (set in main from the parameters).
var<private> zb: u32;

// The activations at vec4 index i (of the token whose row starts at vec4 xrow0): x itself, or
// with NORM = 1 its RMSNorm, x · r · weight in rmsnorm.wgsl's order, rounded as a stored value:
// the OR with an unknown zero keeps a driver from contracting the product into a later add (an
// FMA in Q4's Σx, seen on lavapipe), so the GEMV sums rmsnorm.wgsl's output values.
fn xin(i: u32) -> vec4<f32> {
    if (NORM == 1u) {
        let v = x[i] * nscale * nw[i - xrow0];
        return bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) | vec4<u32>(zb));
    }
    return x[i];
}

// The 16 bytes at byte offset `off` as 4 little-endian words (5 aligned loads when unaligned).
fn load4(off: u32) -> vec4<u32> {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    let a = vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
    if (sh == 0u) {
        return a;
    }
    let b = vec4<u32>(a.y, a.z, a.w, w[i + 4u]);
    return (a >> vec4<u32>(sh)) | (b << vec4<u32>(32u - sh));
}

const BYTE_SHIFT: vec4<u32> = vec4<u32>(0u, 8u, 16u, 24u);

// The 4 signed bytes of `q` as floats.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<i32>(vec4<u32>(q) << (vec4<u32>(24u) - BYTE_SHIFT))) >> vec4<u32>(24u));
}

// The low (hi = 0) or high (hi = 4) nibbles of the 4 bytes of `q` as floats.
fn nib4(q: u32, hi: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> (BYTE_SHIFT + vec4<u32>(hi))) & vec4<u32>(0xfu));
}

fn block_bytes() -> u32 {
    if (QTYPE == 0u) {
        return 34u;
    }
    if (QTYPE == 1u) {
        return 18u;
    }
    return 20u;
}

// Bytes of one row of blocks.
fn row_bytes() -> u32 {
    if (QTYPE == 3u) {
        return p.blocks_per_row / 8u * 210u;
    }
    if (QTYPE >= 4u) {
        return kq_row_bytes(QTYPE, p.blocks_per_row);
    }
    return p.blocks_per_row * block_bytes();
}

// Q5_0 / Q5_1: the block at byte `off` dotted with x[xv .. xv + 8]: d·(Σq·x − 16·Σx) or
// d·Σq·x + m·Σx (q = nibble | 5th bit << 4; layouts in ggml_kquants.wgsl).
fn dot_q5(off: u32, xv: u32) -> f32 {
    let qh = load32(off + select(2u, 4u, QTYPE == 5u));
    let qo = off + select(6u, 8u, QTYPE == 5u);
    var sq = 0.0;
    var sx = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i = i + 1u) {
        let nib = (kq_b4(load32(qo + (4u * i) % 16u)) >> vec4<u32>(select(0u, 4u, i >= 4u))) & vec4<u32>(0xfu);
        let hb = (vec4<u32>(qh) >> (vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
        let xx = xin(xv + i);
        sq = sq + dot(vec4<f32>(nib | (hb << vec4<u32>(4u))), xx);
        sx = sx + xx;
    }
    let d = kq_f16(off);
    if (QTYPE == 5u) {
        return d * sq + kq_f16(off + 2u) * dot(sx, vec4<f32>(1.0));
    }
    return d * (sq - 16.0 * dot(sx, vec4<f32>(1.0)));
}

// Q4_K / Q5_K: unit `u` (sub-block u % 8 of super-block u / 8: one scale and one min) of the row at
// byte `rbase` dotted with x[xv .. xv + 8]: (d·sc)·Σq·x − (dmin·m)·Σx.
fn dot_q45_k(rbase: u32, u: u32, xv: u32) -> f32 {
    let off = rbase + (u / 8u) * kq_block_bytes(QTYPE);
    let j = u % 8u;
    let sm = kq_scale_min(vec3<u32>(load32(off + 4u), load32(off + 8u), load32(off + 12u)), j);
    let qo = off + select(16u, 48u, QTYPE == 9u) + 32u * (j / 2u);
    var sq = 0.0;
    var sx = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i = i + 1u) {
        var q = (kq_b4(load32(qo + 4u * i)) >> vec4<u32>(4u * (j % 2u))) & vec4<u32>(0xfu);
        if (QTYPE == 9u) {
            // the 5th bit: bit j of qh byte l (ggml_kquants.wgsl)
            q = q | (((kq_b4(load32(off + 16u + 4u * i)) >> vec4<u32>(j)) & vec4<u32>(1u)) << vec4<u32>(4u));
        }
        let xx = xin(xv + i);
        sq = sq + dot(vec4<f32>(q), xx);
        sx = sx + xx;
    }
    return kq_f16(off) * f32(sm.x) * sq - kq_f16(off + 2u) * f32(sm.y) * dot(sx, vec4<f32>(1.0));
}

// QTYPE ≥ 4 (the others): 32-column unit `u` of the row at byte `rbase` dotted with
// x[xv .. xv + 8] (vec4s), dequantized 4 at a time by kq4.
fn dot_kq(rbase: u32, u: u32, xv: u32) -> f32 {
    let c = u * 32u;
    var s = dot(kq4(QTYPE, rbase, c), xin(xv)) + dot(kq4(QTYPE, rbase, c + 4u), xin(xv + 1u));
    s = s + dot(kq4(QTYPE, rbase, c + 8u), xin(xv + 2u)) + dot(kq4(QTYPE, rbase, c + 12u), xin(xv + 3u));
    s = s + dot(kq4(QTYPE, rbase, c + 16u), xin(xv + 4u)) + dot(kq4(QTYPE, rbase, c + 20u), xin(xv + 5u));
    s = s + dot(kq4(QTYPE, rbase, c + 24u), xin(xv + 6u)) + dot(kq4(QTYPE, rbase, c + 28u), xin(xv + 7u));
    return s;
}

// Q8_0: the block at byte `off` dotted with x[xv .. xv + 8] (vec4s).
fn dot_q8_0(off: u32, xv: u32) -> f32 {
    let d = f16_at(off);
    let q0 = load4(off + 2u);
    let q1 = load4(off + 18u);
    var s = dot(i8x4(q0.x), xin(xv)) + dot(i8x4(q0.y), xin(xv + 1u));
    s = s + dot(i8x4(q0.z), xin(xv + 2u)) + dot(i8x4(q0.w), xin(xv + 3u));
    s = s + dot(i8x4(q1.x), xin(xv + 4u)) + dot(i8x4(q1.y), xin(xv + 5u));
    s = s + dot(i8x4(q1.z), xin(xv + 6u)) + dot(i8x4(q1.w), xin(xv + 7u));
    return s * d;
}

// Q4_0 / Q4_1: the block at byte `off` dotted with x[xv .. xv + 8]: d·Σ(q − 8)·x or d·Σq·x + m·Σx.
fn dot_q4(off: u32, xv: u32) -> f32 {
    let d = f16_at(off);
    var qoff = off + 2u;
    if (QTYPE == 2u) {
        qoff = off + 4u;
    }
    let q = load4(qoff);
    let x0 = xin(xv);
    let x1 = xin(xv + 1u);
    let x2 = xin(xv + 2u);
    let x3 = xin(xv + 3u);
    let x4 = xin(xv + 4u);
    let x5 = xin(xv + 5u);
    let x6 = xin(xv + 6u);
    let x7 = xin(xv + 7u);
    var s = dot(nib4(q.x, 0u), x0) + dot(nib4(q.y, 0u), x1) + dot(nib4(q.z, 0u), x2);
    s = s + dot(nib4(q.w, 0u), x3) + dot(nib4(q.x, 4u), x4) + dot(nib4(q.y, 4u), x5);
    s = s + dot(nib4(q.z, 4u), x6) + dot(nib4(q.w, 4u), x7);
    let sx = dot((x0 + x1) + (x2 + x3) + (x4 + x5) + (x6 + x7), vec4<f32>(1.0));
    if (QTYPE == 2u) {
        return s * d + sx * f16_at(off + 2u);
    }
    return (s - 8.0 * sx) * d;
}

// The 8 bytes at even byte offset `off` as 2 little-endian words (3 aligned loads at 2 mod 4).
fn load2(off: u32) -> vec2<u32> {
    let i = off >> 2u;
    let a = vec2<u32>(w[i], w[i + 1u]);
    if ((off & 2u) == 0u) {
        return a;
    }
    let b = vec2<u32>(a.y, w[i + 2u]);
    return (a >> vec2<u32>(16u)) | (b << vec2<u32>(16u));
}

// Signed byte `k` (0..3) of `v` as a float.
fn i8_at(v: u32, k: u32) -> f32 {
    return f32(extractBits(bitcast<i32>(v), k * 8u, 8u));
}

// Q6_K quants of 4 elements: the nibbles at shift `ns` of the 4 bytes of `ql` below the 2 bits at
// shift `hs` of the 4 bytes of `qh`, minus 32, as floats.
fn q6x4(ql: u32, qh: u32, ns: u32, hs: u32) -> vec4<f32> {
    let lo = (vec4<u32>(ql) >> (BYTE_SHIFT + vec4<u32>(ns))) & vec4<u32>(0xfu);
    let hi = (vec4<u32>(qh) >> (BYTE_SHIFT + vec4<u32>(hs))) & vec4<u32>(3u);
    return vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u)))) - vec4<f32>(32.0);
}

// One Q6_K unit's words, loaded before they are summed: a.xy, a.zw = the two ql pieces, b.xy =
// the qh piece, b.zw = the half's 8 scales, c.x = d's bits, c.y = the unit's index in its
// super-block.
struct Q6Unit {
    a: vec4<u32>,
    b: vec4<u32>,
    c: vec2<u32>,
}

// Q6_K unit `u` of the row at byte `rbase` (dequantize_row_q6_K: unit j = u % 8 of super-block
// u / 8 holds half h = j / 4, l = 8·(j % 4) + i, i < 8 of the elements 128·h + 32·quarter + l:
// byte l of ql run 64·h (low nibble: quarter 0, high: quarter 2) and of ql run 64·h + 32
// (quarters 1, 3), bits 2·quarter of qh byte 32·h + l; quarter q's scale is byte
// 8·h + l / 16 + 2·q). Every field starts at an even byte.
fn load_q6(rbase: u32, u: u32) -> Q6Unit {
    let off = rbase + (u / 8u) * 210u;
    let j = u % 8u;
    let h = j / 4u;
    let b = off + h * 64u + (j % 4u) * 8u;
    var r: Q6Unit;
    r.a = vec4<u32>(load2(b), load2(b + 32u));
    r.b = vec4<u32>(load2(off + 128u + h * 32u + (j % 4u) * 8u), load2(off + 192u + h * 8u));
    r.c = vec2<u32>((w[(off + 208u) >> 2u] >> (((off + 208u) & 2u) * 8u)) & 0xffffu, j);
    return r;
}

// Q6_K: unit `r` dotted with token `tok`'s activations, `u` its index in the row. Each quarter's
// 8-element sum takes its scale, the unit's sum d.
fn dot_q6_k(r: Q6Unit, u: u32, tok: u32) -> f32 {
    let j = r.c.y;
    let k = j % 4u;
    let la = r.a.xy;
    let lb = r.a.zw;
    let qh = r.b.xy;
    let sc = r.b.zw;
    let s0 = k / 2u;
    let x0 = tok * (p.cols / 4u) + (u / 8u) * 64u + (j / 4u) * 32u + k * 2u;
    let d0 = dot(q6x4(la.x, qh.x, 0u, 0u), xin(x0)) + dot(q6x4(la.y, qh.y, 0u, 0u), xin(x0 + 1u));
    let d1 = dot(q6x4(lb.x, qh.x, 0u, 2u), xin(x0 + 8u)) + dot(q6x4(lb.y, qh.y, 0u, 2u), xin(x0 + 9u));
    let d2 = dot(q6x4(la.x, qh.x, 4u, 4u), xin(x0 + 16u)) + dot(q6x4(la.y, qh.y, 4u, 4u), xin(x0 + 17u));
    let d3 = dot(q6x4(lb.x, qh.x, 4u, 6u), xin(x0 + 24u)) + dot(q6x4(lb.y, qh.y, 4u, 6u), xin(x0 + 25u));
    let s = (d0 * i8_at(sc.x, s0) + d1 * i8_at(sc.x, s0 + 2u)) + (d2 * i8_at(sc.y, s0) + d3 * i8_at(sc.y, s0 + 2u));
    return s * f16_bits_to_f32(r.c.x);
}

// Block `u` (Q8_0 / Q4_0 / Q4_1; a 32-column unit of QTYPE ≥ 4) of the row at byte `rbase` dotted with token `tok`'s activations.
fn unit_dot(rbase: u32, u: u32, tok: u32) -> f32 {
    let xrow = tok * (p.cols / 4u);
    if (QTYPE == 4u || QTYPE == 5u) {
        return dot_q5(rbase + u * kq_block_bytes(QTYPE), xrow + u * 8u);
    }
    if (QTYPE == 8u || QTYPE == 9u) {
        return dot_q45_k(rbase, u, xrow + u * 8u);
    }
    if (QTYPE >= 4u) {
        return dot_kq(rbase, u, xrow + u * 8u);
    }
    if (QTYPE == 0u) {
        return dot_q8_0(rbase + u * 34u, xrow + u * 8u);
    }
    return dot_q4(rbase + u * block_bytes(), xrow + u * 8u);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let rpw = WG / TPR;
    let lrow = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * rpw + lrow;
    let tok = wg.y;
    let live = row < p.rows && tok < p.n_tokens;
    if (NORM == 1u) {
        // the fused prologue: this token's RMSNorm multiplier (every workgroup of the token
        // computes it; grid y is the token: uniform in the workgroup)
        zb = p.cols >> 31u; // 0: cols < 2^31 (a binding's bytes)
        let t = min(tok, max(p.n_tokens, 1u) - 1u);
        nscale = rms_scale(lid, t * p.cols, p.cols, p.eps, tok < p.n_tokens);
        xrow0 = t * (p.cols / 4u);
        workgroupBarrier();
    }
    var acc = 0.0;
    if (live) {
        let rbase = row * row_bytes();
        let n = p.blocks_per_row;
        var u = lane;
        if (QTYPE == 3u) {
            // two units per step; the next two are loaded before these are summed
            var r0: Q6Unit;
            var r1: Q6Unit;
            if (u < n) {
                r0 = load_q6(rbase, u);
            }
            if (u + TPR < n) {
                r1 = load_q6(rbase, u + TPR);
            }
            for (; u < n; u = u + 2u * TPR) {
                let c0 = r0;
                let c1 = r1;
                if (u + 2u * TPR < n) {
                    r0 = load_q6(rbase, u + 2u * TPR);
                }
                if (u + 3u * TPR < n) {
                    r1 = load_q6(rbase, u + 3u * TPR);
                }
                var s = dot_q6_k(c0, u, tok);
                if (u + TPR < n) {
                    s = s + dot_q6_k(c1, u + TPR, tok);
                }
                acc = acc + s;
            }
        } else {
            for (; u + TPR < n; u = u + 2u * TPR) {
                let a = unit_dot(rbase, u, tok);
                let b = unit_dot(rbase, u + TPR, tok);
                acc = acc + (a + b);
            }
            if (u < n) {
                acc = acc + unit_dot(rbase, u, tok);
            }
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var st = TPR / 2u; st > 0u; st = st >> 1u) {
        if (lane < st) {
            partial[lid] = partial[lid] + partial[lid + st];
        }
        workgroupBarrier();
    }
    if (lane == 0u && live) {
        if ((p.mode & 4u) != 0u && (p.mode & 3u) >= 2u) {
            // gate/up row pairs: the odd row stores the pair's GLU (the gate's sum is its
            // partner's partial, already reduced)
            if ((row & 1u) == 1u) {
                let o = tok * (p.out_stride / 2u) + (p.row0 + row) / 2u;
                glu_pair(o, partial[lid - TPR], partial[lid]);
            }
        } else {
            store(tok * p.out_stride + p.row0 + row, partial[lid]);
        }
    }
}

// Gate/up row pairs (mode bit 2, with the GLU epilogues 2 and 3; rows 2j, 2j + 1 are the gate's
// and the up projection's row j, parts start on a pair; y has out_stride / 2 columns):
// y[t][j] = relu(g)² · u or silu(g) · u, the arithmetic of `store` with the gate in y.
fn glu_pair(o: u32, gate: f32, res: f32) {
    if ((p.mode & 3u) == 2u) {
        let g = max(gate, 0.0);
        y[o] = g * g * res;
    } else {
        y[o] = gate / (1.0 + exp(-gate)) * res;
    }
}

// The epilogue (issue 15's decode fusions), by `p.mode`: 0 y = W·x; 1 y = y + W·x (residual add
// in place); 2 y = relu(y)² · (W·x); 3 y = silu(y) · (W·x) (the GLU with the gate already in y;
// elementwise.wgsl's arithmetic, so the same bits as the separate pass).
fn store(o: u32, res: f32) {
    let epi = p.mode & 3u;
    if (epi == 0u) {
        y[o] = res;
    } else if (epi == 1u) {
        y[o] = y[o] + res;
    } else if (epi == 2u) {
        let g = max(y[o], 0.0);
        y[o] = g * g * res;
    } else {
        let g = y[o];
        y[o] = g / (1.0 + exp(-g)) * res;
    }
}
