// ggml block GEMV/GEMM with f32 activations: y[t][r] = Σ_c dequant(W)[r][c] · x[t][c] for Q8_0,
// Q4_0 and Q4_1 rows kept exactly as llama.cpp stores them (runtime/format/src/ggml.rs). Blocks are
// byte-packed with no padding (34, 18, 20 bytes), so a block is read from the array<u32> at a byte
// offset that is usually not a multiple of 4: `load32` funnel-shifts two words.
// Dequantization as ggml: Q8_0 x = q·d; Q4_0 x = (q − 8)·d; Q4_1 x = q·d + m (byte j of qs: low
// nibble = element j, high nibble = element j + 16). f32 accumulation in a different order than
// the reference's `dot_f32`: NMSE against it is ~1e-14, the parity bound is 1e-6.
//
// Q6_K (256-element super-blocks of 210 bytes: ql[128], qh[64], scales[16] i8, d f16) is read in
// 32-column units (one eighth of a super-block each, see `q6k_unit_dot`), x = (d·sc)·q as ggml.
//
// Override constants: QTYPE 0 = Q8_0, 1 = Q4_0, 2 = Q4_1, 3 = Q6_K; TPR invocations per row
// (divides 256).
// Bindings: w [rows_part] rows of blocks (bytes; blocks_per_row = cols / 32 units); x [n_tokens][cols] f32;
//           y [n_tokens][out_stride] f32, this part writes columns row0 .. row0 + rows.

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
@group(0) @binding(2) var<storage, read> x: array<f32>;
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

fn f16_at(off: u32) -> f32 {
    return f16_bits_to_f32(load32(off) & 0xffffu);
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

// Q6_K: Σ over the 32 elements of unit kc (quarter kc % 4 of half kc / 4) of the super-block at
// byte `off` times x[xb .. xb + 32] (dequantize_row_q6_K: element l of the quarter takes ql's low
// nibble (quarters 0, 1) or high nibble (2, 3) of byte 64·half + 32·(kc % 2) + l, bits 2·qd of qh
// byte 32·half + l, scale 8·half + l / 16 + 2·qd).
fn q6k_unit_dot(off: u32, kc: u32, xb: u32) -> f32 {
    let hf = kc / 4u;
    let qd = kc % 4u;
    let d = f16_at(off + 208u);
    var acc = 0.0;
    for (var s = 0u; s < 2u; s = s + 1u) {
        let scb = load32(off + 192u + hf * 8u + s + 2u * qd) & 0xffu;
        let dsc = d * f32(extractBits(bitcast<i32>(scb), 0u, 8u));
        for (var k = 0u; k < 4u; k = k + 1u) {
            let l = 16u * s + 4u * k;
            let qlw = load32(off + hf * 64u + (qd & 1u) * 32u + l);
            let qhw = load32(off + 128u + hf * 32u + l);
            for (var b = 0u; b < 4u; b = b + 1u) {
                let qlb = (qlw >> (8u * b)) & 0xffu;
                let lo = select(qlb & 0xfu, qlb >> 4u, qd >= 2u);
                let hi = (qhw >> (8u * b + 2u * qd)) & 3u;
                acc = acc + (dsc * f32(i32(lo | (hi << 4u)) - 32)) * x[xb + l + b];
            }
        }
    }
    return acc;
}

// Σ over the 32 elements of the block at byte `off` times x[xb .. xb + 32].
fn block_dot(off: u32, xb: u32) -> f32 {
    let d = f16_at(off);
    var acc = 0.0;
    if (QTYPE == 0u) {
        for (var k = 0u; k < 8u; k = k + 1u) {
            let qw = bitcast<i32>(load32(off + 2u + 4u * k));
            for (var b = 0u; b < 4u; b = b + 1u) {
                let qv = f32(extractBits(qw, 8u * b, 8u));
                acc = acc + (qv * d) * x[xb + 4u * k + b];
            }
        }
        return acc;
    }
    var m = 0.0;
    var qoff = off + 2u;
    if (QTYPE == 2u) {
        m = f16_at(off + 2u);
        qoff = off + 4u;
    }
    for (var k = 0u; k < 4u; k = k + 1u) {
        let qw = load32(qoff + 4u * k);
        for (var b = 0u; b < 4u; b = b + 1u) {
            let j = 4u * k + b;
            let byte = (qw >> (8u * b)) & 0xffu;
            let lo = f32(byte & 0xfu);
            let hi = f32(byte >> 4u);
            var vlo = 0.0;
            var vhi = 0.0;
            if (QTYPE == 1u) {
                vlo = (lo - 8.0) * d;
                vhi = (hi - 8.0) * d;
            } else {
                vlo = lo * d + m;
                vhi = hi * d + m;
            }
            acc = acc + vlo * x[xb + j] + vhi * x[xb + j + 16u];
        }
    }
    return acc;
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
        let bb = block_bytes();
        let rbase = row * row_bytes();
        for (var b = lane; b < p.blocks_per_row; b = b + TPR) {
            if (QTYPE == 3u) {
                acc = acc + q6k_unit_dot(rbase + (b / 8u) * 210u, b % 8u, tok * p.cols + b * 32u);
            } else {
                acc = acc + block_dot(rbase + b * bb, tok * p.cols + b * 32u);
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
    if (lane == 0u && row < p.rows && tok < p.n_tokens) {
        store(tok * p.out_stride + p.row0 + row, partial[lid]);
    }
}

// The epilogue (issue 15's decode fusions), by `p.mode`: 0 y = W·x; 1 y = y + W·x (residual add
// in place); 2 y = relu(y)² · (W·x); 3 y = silu(y) · (W·x) (the GLU with the gate already in y;
// elementwise.wgsl's arithmetic, so the same bits as the separate pass).
fn store(o: u32, res: f32) {
    if (p.mode == 0u) {
        y[o] = res;
    } else if (p.mode == 1u) {
        y[o] = y[o] + res;
    } else if (p.mode == 2u) {
        let g = max(y[o], 0.0);
        y[o] = g * g * res;
    } else {
        let g = y[o];
        y[o] = g / (1.0 + exp(-g)) * res;
    }
}
