// ggml block GEMV with f32 activations: y[t][r] = Σ_c dequant(W)[r][c] · x[t][c] for Q8_0, Q4_0,
// Q4_1 and Q6_K rows kept exactly as llama.cpp stores them (runtime/format/src/ggml.rs).
// Dequantization as ggml: Q8_0 x = q·d; Q4_0 x = (q − 8)·d; Q4_1 x = q·d + m (byte j of qs: low
// nibble = element j, high nibble = element j + 16); Q6_K (256-element super-blocks of 210 bytes:
// ql[128], qh[64], scales[16] i8, d f16) x = (d·sc)·q.
//
// Load pattern: 8 rows per workgroup, 32 invocations per row striding over the row's 32-column
// units (a Q8_0/Q4_0/Q4_1 block; for Q6_K an eighth of a super-block: 8 consecutive bytes of each
// of its two ql runs and of its qh run, so consecutive lanes read consecutive 8-byte pieces).
// Block bytes are read as aligned words (blocks are byte-packed with no padding — 34, 18, 20, 210
// bytes — so a field may start 2 bytes past a word: two aligned words make each word there; an
// f16 field is one load), dequantization in registers. Each invocation issues its first two
// units' loads, then the workgroup stages the token's activation row once in workgroup memory
// (rows up to XS_FLOATS columns; longer rows are read from the storage buffer); each step loads
// the next two units before it sums the current two. Then a shared-memory reduction (no
// subgroups: downlevel). f32 accumulation in a different order than the reference's `dot_f32`
// (the block's — Q6_K: the scale group's — scale is applied to its sum): NMSE against it
// ~1e-14, the parity bound is 1e-6.
//
// `load_unit` reads a unit's words, each format's dequantize-and-dot is its own function
// (`dot_q8_0`, `dot_q4`, `dot_q6_k`), `unit_dot` picks one, `main` stages, strides and reduces.
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
// Columns of the activation row a workgroup stages in workgroup memory (12 KiB; with `partial`
// 13 KiB of the downlevel 16,352 bytes).
const XS_FLOATS: u32 = 3072u;
var<workgroup> partial: array<f32, 256>;
var<workgroup> xs: array<vec4<f32>, 768>;

// Where this invocation's token row of x is: staged in `xs`, or in `x` from vec4 `xrow` on.
var<private> staged: bool;
var<private> xrow: u32;

// vec4 `i` of the token's activation row.
fn xv(i: u32) -> vec4<f32> {
    if (staged) {
        return xs[i];
    }
    return x[xrow + i];
}

// Every block field starts at an even byte (block sizes 34, 18, 20, 210; fields at even offsets):
// a word there is one aligned load, or the halves of two.

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

// The 16 bytes at even byte offset `off` as 4 little-endian words (5 aligned loads at 2 mod 4).
fn load4(off: u32) -> vec4<u32> {
    let i = off >> 2u;
    let a = vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
    if ((off & 2u) == 0u) {
        return a;
    }
    let b = vec4<u32>(a.y, a.z, a.w, w[i + 4u]);
    return (a >> vec4<u32>(16u)) | (b << vec4<u32>(16u));
}

const BYTE_SHIFT: vec4<u32> = vec4<u32>(0u, 8u, 16u, 24u);

// The 4 signed bytes of `q` as floats.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<i32>(vec4<u32>(q) << (vec4<u32>(24u) - BYTE_SHIFT))) >> vec4<u32>(24u));
}

// Signed byte `k` (0..3) of `v` as a float.
fn i8_at(v: u32, k: u32) -> f32 {
    return f32(extractBits(bitcast<i32>(v), k * 8u, 8u));
}

// The low (hi = 0) or high (hi = 4) nibbles of the 4 bytes of `q` as floats.
fn nib4(q: u32, hi: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> (BYTE_SHIFT + vec4<u32>(hi))) & vec4<u32>(0xfu));
}

// Q6_K quants of 4 elements: the nibbles at shift `ns` of the 4 bytes of `ql` below the 2 bits at
// shift `hs` of the 4 bytes of `qh`, minus 32, as floats.
fn q6x4(ql: u32, qh: u32, ns: u32, hs: u32) -> vec4<f32> {
    let lo = (vec4<u32>(ql) >> (BYTE_SHIFT + vec4<u32>(ns))) & vec4<u32>(0xfu);
    let hi = (vec4<u32>(qh) >> (BYTE_SHIFT + vec4<u32>(hs))) & vec4<u32>(3u);
    return vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u)))) - vec4<f32>(32.0);
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

// One 32-column unit's raw words, loaded before they are used (the first ones before the
// activations are staged, the next ones while the current ones are summed): Q8_0 a, b = the 32
// quants, c.x = d's bits; Q4_0/Q4_1 a = the 16 quant bytes, c.x = d's bits, c.y = m's bits;
// Q6_K a.xy, a.zw = the two ql pieces, b.xy = the qh piece, b.zw = the half's 8 scales, c.x = d's
// bits, c.y = the unit's index in its super-block.
struct Unit {
    a: vec4<u32>,
    b: vec4<u32>,
    c: vec2<u32>,
}

// The bits of the f16 at even byte offset `off` (one load).
fn f16_bits(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 2u) * 8u)) & 0xffffu;
}

// Unit `u` of the row at byte `rbase`: its words (Q6_K: unit j = u % 8 of super-block u / 8 holds
// half h = j / 4, l = 8·(j % 4) + i, i < 8 of dequantize_row_q6_K's elements 128·h + 32·quarter +
// l: byte l of ql run 64·h (low nibble: quarter 0, high: quarter 2) and of ql run 64·h + 32
// (quarters 1, 3), bits 2·quarter of qh byte 32·h + l; quarter q's scale is byte 8·h + l / 16 + 2·q).
fn load_unit(rbase: u32, u: u32) -> Unit {
    var r: Unit;
    if (QTYPE == 3u) {
        let off = rbase + (u / 8u) * 210u;
        let j = u % 8u;
        let h = j / 4u;
        let b = off + h * 64u + (j % 4u) * 8u;
        r.a = vec4<u32>(load2(b), load2(b + 32u));
        r.b = vec4<u32>(load2(off + 128u + h * 32u + (j % 4u) * 8u), load2(off + 192u + h * 8u));
        r.c = vec2<u32>(f16_bits(off + 208u), j);
    } else if (QTYPE == 0u) {
        let off = rbase + u * 34u;
        r.a = load4(off + 2u);
        r.b = load4(off + 18u);
        r.c = vec2<u32>(f16_bits(off), 0u);
    } else {
        let off = rbase + u * block_bytes();
        if (QTYPE == 2u) {
            let dm = w[off >> 2u]; // 20-byte blocks: d and m are one aligned word
            r.a = load4(off + 4u);
            r.c = vec2<u32>(dm & 0xffffu, dm >> 16u);
        } else {
            r.a = load4(off + 2u);
            r.c = vec2<u32>(f16_bits(off), 0u);
        }
    }
    return r;
}

// Q8_0: the block's quants `q0`, `q1` (scale d) dotted with xv(xi .. xi + 8).
fn dot_q8_0(q0: vec4<u32>, q1: vec4<u32>, d: f32, xi: u32) -> f32 {
    var s = dot(i8x4(q0.x), xv(xi)) + dot(i8x4(q0.y), xv(xi + 1u));
    s = s + dot(i8x4(q0.z), xv(xi + 2u)) + dot(i8x4(q0.w), xv(xi + 3u));
    s = s + dot(i8x4(q1.x), xv(xi + 4u)) + dot(i8x4(q1.y), xv(xi + 5u));
    s = s + dot(i8x4(q1.z), xv(xi + 6u)) + dot(i8x4(q1.w), xv(xi + 7u));
    return s * d;
}

// Q4_0 / Q4_1: the block's quant bytes `q` (scale d, Q4_1 minimum m) dotted with xv(xi .. xi + 8):
// d·Σ(q − 8)·x or d·Σq·x + m·Σx.
fn dot_q4(q: vec4<u32>, d: f32, m: f32, xi: u32) -> f32 {
    let x0 = xv(xi);
    let x1 = xv(xi + 1u);
    let x2 = xv(xi + 2u);
    let x3 = xv(xi + 3u);
    let x4 = xv(xi + 4u);
    let x5 = xv(xi + 5u);
    let x6 = xv(xi + 6u);
    let x7 = xv(xi + 7u);
    var s = dot(nib4(q.x, 0u), x0) + dot(nib4(q.y, 0u), x1) + dot(nib4(q.z, 0u), x2);
    s = s + dot(nib4(q.w, 0u), x3) + dot(nib4(q.x, 4u), x4) + dot(nib4(q.y, 4u), x5);
    s = s + dot(nib4(q.z, 4u), x6) + dot(nib4(q.w, 4u), x7);
    let sx = dot((x0 + x1) + (x2 + x3) + (x4 + x5) + (x6 + x7), vec4<f32>(1.0));
    if (QTYPE == 2u) {
        return s * d + sx * m;
    }
    return (s - 8.0 * sx) * d;
}

// Q6_K: unit `r` (ql pieces la, lb, qh piece, scales sc; `load_unit`) dotted with its activations,
// xi the super-block's first vec4. Each quarter's 8-element sum takes its scale, the unit's sum d.
fn dot_q6_k(r: Unit, xi: u32) -> f32 {
    let j = r.c.y;
    let k = j % 4u;
    let la = r.a.xy;
    let lb = r.a.zw;
    let qh = r.b.xy;
    let sc = r.b.zw;
    let s0 = k / 2u;
    let x0 = xi + (j / 4u) * 32u + k * 2u;
    let d0 = dot(q6x4(la.x, qh.x, 0u, 0u), xv(x0)) + dot(q6x4(la.y, qh.y, 0u, 0u), xv(x0 + 1u));
    let d1 = dot(q6x4(lb.x, qh.x, 0u, 2u), xv(x0 + 8u)) + dot(q6x4(lb.y, qh.y, 0u, 2u), xv(x0 + 9u));
    let d2 = dot(q6x4(la.x, qh.x, 4u, 4u), xv(x0 + 16u)) + dot(q6x4(la.y, qh.y, 4u, 4u), xv(x0 + 17u));
    let d3 = dot(q6x4(lb.x, qh.x, 4u, 6u), xv(x0 + 24u)) + dot(q6x4(lb.y, qh.y, 4u, 6u), xv(x0 + 25u));
    let s = (d0 * i8_at(sc.x, s0) + d1 * i8_at(sc.x, s0 + 2u)) + (d2 * i8_at(sc.y, s0) + d3 * i8_at(sc.y, s0 + 2u));
    return s * f16_bits_to_f32(r.c.x);
}

// Unit `u` (loaded as `r`) dotted with the token's activations.
fn unit_dot(r: Unit, u: u32) -> f32 {
    if (QTYPE == 3u) {
        return dot_q6_k(r, (u / 8u) * 64u);
    }
    let d = f16_bits_to_f32(r.c.x);
    if (QTYPE == 0u) {
        return dot_q8_0(r.a, r.b, d, u * 8u);
    }
    return dot_q4(r.a, d, f16_bits_to_f32(r.c.y), u * 8u);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let rpw = WG / TPR;
    let lrow = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * rpw + lrow;
    let tok = wg.y;
    let live = row < p.rows && tok < p.n_tokens;
    let n = select(0u, p.blocks_per_row, live);
    let rbase = row * row_bytes();
    // the first two units' loads go out before the activations are staged
    var u = lane;
    var r0: Unit;
    var r1: Unit;
    if (u < n) {
        r0 = load_unit(rbase, u);
    }
    if (u + TPR < n) {
        r1 = load_unit(rbase, u + TPR);
    }
    let n4 = p.cols / 4u;
    xrow = tok * n4;
    staged = p.cols <= XS_FLOATS;
    if (staged && tok < p.n_tokens) {
        for (var i = lid; i < n4; i = i + WG) {
            xs[i] = x[xrow + i];
        }
    }
    workgroupBarrier();
    // two units per step; the next two are loaded before these are summed
    var acc = 0.0;
    for (; u < n; u = u + 2u * TPR) {
        let c0 = r0;
        let c1 = r1;
        if (u + 2u * TPR < n) {
            r0 = load_unit(rbase, u + 2u * TPR);
        }
        if (u + 3u * TPR < n) {
            r1 = load_unit(rbase, u + 3u * TPR);
        }
        var s = unit_dot(c0, u);
        if (u + TPR < n) {
            s = s + unit_dot(c1, u + TPR);
        }
        acc = acc + s;
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
