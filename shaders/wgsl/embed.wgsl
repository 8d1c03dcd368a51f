// Token-embedding lookup: out[i][c] = dequant(table)[ids[i]][c] for one row part of the table
// (rows row0 .. row0 + rows; the launcher dispatches every part, each writes only its own ids).
// Dequantization is exactly tern_format's: f32 / f16 / bf16 widened; Q8_0 x = q·d;
// Q4_0 x = (q − 8)·d; Q4_1 x = q·d + m (q·d is exact, so a fused multiply-add rounds the same);
// Q6_K x = (d·sc)·q — each a single correctly rounded f32 operation as on the CPU: bit-exact.
// An id ≥ total_rows (the host validates ids first) reads nothing and writes zeros (part 0 only).
// Override SRC: 0 f32, 1 f16, 2 bf16 (elements; 16-bit ones two per u32 word, low half first,
// element e of the part at element elem_offset + e), 3 Q8_0, 4 Q4_0, 5 Q4_1, 6 Q6_K, 7..13 = 3 +
// ggml_kquants.wgsl's types (Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, IQ4_NL; its kq4, bit-exact)
// (blocks byte-packed as stored, a row is row_bytes bytes from the part's start).
// Workgroup (column block, i): invocation c of the block writes column c.
// Bindings: params; table (u32 words); ids [n] u32; out [n][cols] f32.

// #import common
// #import ggml_kquants

override SRC: u32 = 0u;

struct Params {
    cols: u32,
    row0: u32,
    rows: u32,
    total_rows: u32,
    elem_offset: u32,
    row_bytes: u32,
    first_part: u32,
    n: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn byte_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

fn f16_at(off: u32) -> f32 {
    return f16_bits_to_f32(byte_at(off) | (byte_at(off + 1u) << 8u));
}

fn float_elem(i: u32) -> f32 {
    if (SRC == 0u) {
        return bitcast<f32>(w[i]);
    }
    let word = w[i >> 1u];
    let hw = select(word & 0xffffu, word >> 16u, (i & 1u) == 1u);
    if (SRC == 1u) {
        return f16_bits_to_f32(hw);
    }
    return bitcast<f32>(hw << 16u);
}

// Element c of the row starting at byte `rb` of a block-quantized part.
fn block_elem(rb: u32, c: u32) -> f32 {
    if (SRC >= 7u) {
        return kq4(SRC - 3u, rb, c & ~3u)[c & 3u];
    }
    if (SRC == 6u) {
        let off = rb + (c / 256u) * 210u;
        let e = c % 256u;
        let half = e / 128u;
        let qd = (e % 128u) / 32u;
        let l = e % 32u;
        let ql = byte_at(off + half * 64u + (qd % 2u) * 32u + l);
        let lo = select(ql & 0xfu, ql >> 4u, qd >= 2u);
        let qh = (byte_at(off + 128u + half * 32u + l) >> (2u * qd)) & 3u;
        let q = i32(lo | (qh << 4u)) - 32;
        let sb = byte_at(off + 192u + half * 8u + l / 16u + 2u * qd);
        let sc = i32(sb) - select(0, 256, sb >= 128u);
        let d = f16_at(off + 208u);
        return d * f32(sc) * f32(q);
    }
    let j = c % 32u;
    if (SRC == 3u) {
        let off = rb + (c / 32u) * 34u;
        let b = byte_at(off + 2u + j);
        let q = i32(b) - select(0, 256, b >= 128u);
        return f32(q) * f16_at(off);
    }
    if (SRC == 4u) {
        let off = rb + (c / 32u) * 18u;
        let b = byte_at(off + 2u + j % 16u);
        let nib = select(b & 0xfu, b >> 4u, j >= 16u);
        return f32(i32(nib) - 8) * f16_at(off);
    }
    let off = rb + (c / 32u) * 20u;
    let b = byte_at(off + 4u + j % 16u);
    let nib = select(b & 0xfu, b >> 4u, j >= 16u);
    return f32(nib) * f16_at(off) + f16_at(off + 2u);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let c = gid.x;
    let i = wg.y;
    if (c >= p.cols || i >= p.n) {
        return;
    }
    let id = ids[i];
    let o = i * p.cols + c;
    if (id >= p.total_rows) {
        if (p.first_part == 1u) {
            out[o] = 0.0;
        }
        return;
    }
    if (id < p.row0 || id - p.row0 >= p.rows) {
        return;
    }
    let r = id - p.row0;
    if (SRC <= 2u) {
        out[o] = float_elem(p.elem_offset + r * p.cols + c);
    } else {
        out[o] = block_elem(r * p.row_bytes, c);
    }
}
