// ggml block GEMV with f32 activations: y[t][r] = Σ_c dequant(W)[r][c] · x[t][c] for Q8_0, Q4_0,
// Q4_1 and Q6_K rows kept exactly as llama.cpp stores them (runtime/format/src/ggml.rs).
// Dequantization as ggml: Q8_0 x = q·d; Q4_0 x = (q − 8)·d; Q4_1 x = q·d + m (byte j of qs: low
// nibble = element j, high nibble = element j + 16); Q6_K (256-element super-blocks of 210 bytes:
// ql[128], qh[64], scales[16] i8, d f16) x = (d·sc)·q.
//
// Load pattern (the float GEMV's): 8 rows per workgroup, 32 invocations per row striding over
// the row's units (a 32-element block; for Q6_K one 16-element scale group), whole units read as
// 4-word vectors (`load4`: blocks are byte-packed with no padding — 34, 18, 20, 210 bytes — so a
// unit may start at any byte; two shifted aligned words make each word), activations as vec4,
// dequantization in registers, two units in flight per step, then a shared-memory reduction (no
// subgroups: downlevel). f32 accumulation in a different order than the reference's `dot_f32`
// (the block's scale is applied to the block's sum): NMSE against it ~1e-14, the parity bound is
// 1e-6.
//
// Each format's dequantize-and-dot is its own function (`dot_q8_0`, `dot_q4`, `dot_q6_k`);
// `unit_dot` picks one, `main` strides and reduces.
//
// Override constants: QTYPE 0 = Q8_0, 1 = Q4_0, 2 = Q4_1, 3 = Q6_K; TPR invocations per row
// (divides 256).
// Bindings: w [rows_part] rows of blocks (bytes; blocks_per_row = cols / 32 units); x [n_tokens][cols] f32
//           (read as vec4: cols is a multiple of 32); y [n_tokens][out_stride] f32, this part
//           writes columns row0 .. row0 + rows.

struct Params {
    rows: u32,
    cols: u32,
    blocks_per_row: u32, // 32-column units per row (cols / 32)
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    mode: u32, // GEMV epilogue (ggml_gemv.wgsl's `store`); 0 in the GEMM
    _pad1: u32,
}

override QTYPE: u32 = 0u;
override TPR: u32 = 32u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, 256>;

// The 4 bytes at byte offset `off` as a little-endian u32.
fn load32(off: u32) -> u32 {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    let lo = w[i];
    if (sh == 0u) {
        return lo;
    }
    return (lo >> sh) | (w[i + 1u] << (32u - sh));
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

fn f16_at(off: u32) -> f32 {
    return f16_bits_to_f32(load32(off) & 0xffffu);
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
    return p.blocks_per_row * block_bytes();
}

// Units per row: 32-element blocks, 16-element scale groups for Q6_K.
fn units_per_row() -> u32 {
    if (QTYPE == 3u) {
        return p.blocks_per_row * 2u;
    }
    return p.blocks_per_row;
}

// Q8_0: the block at byte `off` dotted with x[xv .. xv + 8] (vec4s).
fn dot_q8_0(off: u32, xv: u32) -> f32 {
    let d = f16_at(off);
    let q0 = load4(off + 2u);
    let q1 = load4(off + 18u);
    var s = dot(i8x4(q0.x), x[xv]) + dot(i8x4(q0.y), x[xv + 1u]);
    s = s + dot(i8x4(q0.z), x[xv + 2u]) + dot(i8x4(q0.w), x[xv + 3u]);
    s = s + dot(i8x4(q1.x), x[xv + 4u]) + dot(i8x4(q1.y), x[xv + 5u]);
    s = s + dot(i8x4(q1.z), x[xv + 6u]) + dot(i8x4(q1.w), x[xv + 7u]);
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
    let x0 = x[xv];
    let x1 = x[xv + 1u];
    let x2 = x[xv + 2u];
    let x3 = x[xv + 3u];
    let x4 = x[xv + 4u];
    let x5 = x[xv + 5u];
    let x6 = x[xv + 6u];
    let x7 = x[xv + 7u];
    var s = dot(nib4(q.x, 0u), x0) + dot(nib4(q.y, 0u), x1) + dot(nib4(q.z, 0u), x2);
    s = s + dot(nib4(q.w, 0u), x3) + dot(nib4(q.x, 4u), x4) + dot(nib4(q.y, 4u), x5);
    s = s + dot(nib4(q.z, 4u), x6) + dot(nib4(q.w, 4u), x7);
    let sx = dot((x0 + x1) + (x2 + x3) + (x4 + x5) + (x6 + x7), vec4<f32>(1.0));
    if (QTYPE == 2u) {
        return s * d + sx * f16_at(off + 2u);
    }
    return (s - 8.0 * sx) * d;
}

// Q6_K: scale group g (0..16) of the super-block at byte `off` dotted with x[xv .. xv + 4]
// (dequantize_row_q6_K: group g = 8·half + 2·quarter + s covers elements 128·half + 32·quarter +
// 16·s + i, i < 16: ql byte 64·half + 32·(quarter % 2) + 16·s + i, low nibble for quarters 0, 1,
// high for 2, 3; bits 2·quarter of qh byte 32·half + 16·s + i; scale byte 8·half + s + 2·quarter).
fn dot_q6_k(off: u32, g: u32, xv: u32) -> f32 {
    let hf = g / 8u;
    let qd = (g / 2u) % 4u;
    let s = g % 2u;
    let d = f16_at(off + 208u);
    let sc = f32(extractBits(bitcast<i32>(load32(off + 192u + hf * 8u + s + 2u * qd)), 0u, 8u));
    let ql = load4(off + hf * 64u + (qd & 1u) * 32u + s * 16u);
    let qh = load4(off + 128u + hf * 32u + s * 16u);
    let nsh = BYTE_SHIFT + vec4<u32>(4u * (qd / 2u));
    let hsh = BYTE_SHIFT + vec4<u32>(2u * qd);
    var acc = 0.0;
    for (var k = 0u; k < 4u; k = k + 1u) {
        let lo = (vec4<u32>(ql[k]) >> nsh) & vec4<u32>(0xfu);
        let hi = (vec4<u32>(qh[k]) >> hsh) & vec4<u32>(3u);
        let q = vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u)))) - vec4<f32>(32.0);
        acc = acc + dot(q, x[xv + k]);
    }
    return acc * (d * sc);
}

// Unit `u` of the row at byte `rbase` dotted with token `tok`'s activations.
fn unit_dot(rbase: u32, u: u32, tok: u32) -> f32 {
    let xrow = tok * (p.cols / 4u);
    if (QTYPE == 3u) {
        return dot_q6_k(rbase + (u / 16u) * 210u, u % 16u, xrow + u * 4u);
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
    var acc = 0.0;
    if (row < p.rows && tok < p.n_tokens) {
        let rbase = row * row_bytes();
        let n = units_per_row();
        var u = lane;
        for (; u + TPR < n; u = u + 2u * TPR) {
            let a = unit_dot(rbase, u, tok);
            let b = unit_dot(rbase, u + TPR, tok);
            acc = acc + (a + b);
        }
        if (u < n) {
            acc = acc + unit_dot(rbase, u, tok);
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
    if (lane == 0u && row < p.rows && tok < p.n_tokens) {
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
