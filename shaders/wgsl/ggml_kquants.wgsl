// The ggml block types Q5_0, Q5_1, IQ4_NL (32-element blocks) and the K-quants Q2_K, Q3_K, Q4_K,
// Q5_K (256-element super-blocks), read as llama.cpp stores them (runtime/format/src/ggml.rs has
// the byte layouts, from ggml/src/ggml-common.h) and dequantized as ggml/src/ggml-quants.c's
// dequantize_row_* does. Every product there is exact in f32 (an f16 scale times a ≤ 8-bit
// integer times a ≤ 5-bit quant), so each value is rounded once, by its final addition or
// subtraction, with or without a driver's fused multiply-add: bit-exact with the CPU.
// Type numbers t are BlockType::gpu_qtype's: 4 Q5_0, 5 Q5_1, 6 Q2_K, 7 Q3_K, 8 Q4_K, 9 Q5_K,
// 10 IQ4_NL. The importer binds `w: array<u32>` (byte_load's load32).
// #import common
// #import byte_load

const KQ_BYTES: vec4<u32> = vec4<u32>(0u, 8u, 16u, 24u);

// Bytes and elements of one block of type t.
fn kq_block_bytes(t: u32) -> u32 {
    switch t {
        case 4u: { return 22u; }
        case 5u: { return 24u; }
        case 6u: { return 84u; }
        case 7u: { return 110u; }
        case 8u: { return 144u; }
        case 9u: { return 176u; }
        default: { return 18u; }
    }
}

fn kq_block_elems(t: u32) -> u32 {
    return select(32u, 256u, t >= 6u && t <= 9u);
}

// Bytes of a row of `units` 32-column units.
fn kq_row_bytes(t: u32, units: u32) -> u32 {
    return units * 32u / kq_block_elems(t) * kq_block_bytes(t);
}

fn kq_f16(off: u32) -> f32 {
    return f16_bits_to_f32(load32(off) & 0xffffu);
}

// The 4 bytes of `v`.
fn kq_b4(v: u32) -> vec4<u32> {
    return (vec4<u32>(v) >> KQ_BYTES) & vec4<u32>(0xffu);
}

// Byte k (0..12) of a K-quant's scales, held as 3 words.
fn kq_sbyte(s: vec3<u32>, k: u32) -> u32 {
    return (s[k / 4u] >> (8u * (k % 4u))) & 0xffu;
}

// Scale (x) and min (y) j (0..8) of a Q4_K / Q5_K super-block: ggml-quants.c get_scale_min_k4.
fn kq_scale_min(s: vec3<u32>, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(kq_sbyte(s, j) & 63u, kq_sbyte(s, j + 4u) & 63u);
    }
    return vec2<u32>((kq_sbyte(s, j + 4u) & 0xfu) | ((kq_sbyte(s, j - 4u) >> 6u) << 4u),
                     (kq_sbyte(s, j + 4u) >> 4u) | ((kq_sbyte(s, j) >> 6u) << 4u));
}

// Elements c .. c + 3 (c a multiple of 4) of the type-t row starting at byte rb.
fn kq4(t: u32, rb: u32, c: u32) -> vec4<f32> {
    if (t == 4u || t == 5u || t == 10u) {
        // Q5_0: d, qh[4], qs[16]; Q5_1: d, m, qh[4], qs[16]; IQ4_NL: d, qs[16]. Byte j of qs holds
        // element j (low nibble) and j + 16 (high); bit j of qh is element j's 5th bit.
        let j = c % 32u;
        let off = rb + (c / 32u) * kq_block_bytes(t);
        let d = kq_f16(off);
        let qo = off + select(select(2u, 8u, t == 5u), 6u, t == 4u);
        let nib = (kq_b4(load32(qo + j % 16u)) >> vec4<u32>(select(0u, 4u, j >= 16u))) & vec4<u32>(0xfu);
        if (t == 10u) {
            // dequantize_row_iq4_nl: d * kvalues_iq4nl[q]
            var kv = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
            return d * vec4<f32>(kv[nib.x], kv[nib.y], kv[nib.z], kv[nib.w]);
        }
        let qh = load32(off + select(2u, 4u, t == 5u));
        let hb = (vec4<u32>(qh) >> (vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
        let q = nib | (hb << vec4<u32>(4u));
        if (t == 4u) {
            // dequantize_row_q5_0: (q - 16) * d
            return vec4<f32>(vec4<i32>(q) - vec4<i32>(16)) * d;
        }
        // dequantize_row_q5_1: q * d + m
        return vec4<f32>(q) * d + vec4<f32>(kq_f16(off + 2u));
    }
    let e = c % 256u;
    let off = rb + (c / 256u) * kq_block_bytes(t);
    if (t == 8u || t == 9u) {
        // Q4_K: d, dmin, scales[12], qs[128]; Q5_K: d, dmin, scales[12], qh[32], qs[128].
        // Chunk cj of 64 elements: byte 32·cj + l of qs, low nibble for l < 32, high above;
        // Q5_K's 5th bit is bit 2·cj (+1 above) of qh byte l % 32. x = (d·sc)·q − dmin·m.
        let cj = e / 64u;
        let hi = (e % 64u) / 32u;
        let l = e % 32u;
        let s = vec3<u32>(load32(off + 4u), load32(off + 8u), load32(off + 12u));
        let sm = kq_scale_min(s, 2u * cj + hi);
        let d1 = kq_f16(off) * f32(sm.x);
        let m1 = kq_f16(off + 2u) * f32(sm.y);
        let qo = off + select(16u, 48u, t == 9u);
        var q = (kq_b4(load32(qo + 32u * cj + l)) >> vec4<u32>(4u * hi)) & vec4<u32>(0xfu);
        if (t == 9u) {
            let h = (kq_b4(load32(off + 16u + l)) >> vec4<u32>(2u * cj + hi)) & vec4<u32>(1u);
            q = q | (h << vec4<u32>(4u));
        }
        return vec4<f32>(d1) * vec4<f32>(q) - vec4<f32>(m1);
    }
    // Q2_K / Q3_K: half n of 128, j of 4 shifts (bits 2·j of qs byte 32·n + k), k of 32: element
    // 128·n + 32·j + k, sub-block scale 8·n + 2·j + k / 16.
    let n = e / 128u;
    let j = (e % 128u) / 32u;
    let k = e % 32u;
    let is = 8u * n + 2u * j + k / 16u;
    if (t == 6u) {
        // Q2_K: scales[16] (scale low nibble, min high), qs[64], d, dmin.
        let sc = load32(off + is) & 0xffu;
        let dl = kq_f16(off + 80u) * f32(sc & 0xfu);
        let ml = kq_f16(off + 82u) * f32(sc >> 4u);
        let q = (kq_b4(load32(off + 16u + 32u * n + k)) >> vec4<u32>(2u * j)) & vec4<u32>(3u);
        return vec4<f32>(dl) * vec4<f32>(q) - vec4<f32>(ml);
    }
    // Q3_K: hmask[32], qs[64], scales[12], d. Scale is = 4·g + i: low 4 bits from byte
    // 4·(g % 2) + i (nibble g / 2), high 2 bits from byte 8 + i (bits 2·g): the aux words of
    // dequantize_row_q3_K. A clear hmask bit (4·n + j of byte k) subtracts 4.
    let g = is / 4u;
    let i = is % 4u;
    let lo = (load32(off + 96u + (g % 2u) * 4u + i) >> (4u * (g / 2u))) & 0xfu;
    let hs = (load32(off + 104u + i) >> (2u * g)) & 3u;
    let dl = kq_f16(off + 108u) * f32(i32(lo | (hs << 4u)) - 32);
    let q = (kq_b4(load32(off + 32u + 32u * n + k)) >> vec4<u32>(2u * j)) & vec4<u32>(3u);
    let hm = (kq_b4(load32(off + k)) >> vec4<u32>(4u * n + j)) & vec4<u32>(1u);
    let v = vec4<i32>(q) - select(vec4<i32>(4), vec4<i32>(0), hm == vec4<u32>(1u));
    return vec4<f32>(dl) * vec4<f32>(v);
}
