// The ternary matmuls' shared operations, imported by ternary_gemv.wgsl,
// ternary_gemv_sparse.wgsl, ternary_gemm.wgsl and ternary_gemm_t128.wgsl (one code, the same
// bits). The kernel declares `p.scale_word_offset`, the weight binding `w` and the overrides
// SCALE_TYPE (0 f32, 1 f16, 2 bf16) and DOT (1 `dot4I8Packed`, 0 the plain byte sum).

// #import packed_dot

// Scale i of the weight part (the scales follow its codes at word `p.scale_word_offset`).
fn scale_at(i: u32) -> f32 {
    let o = p.scale_word_offset;
    if (SCALE_TYPE == 0u) {
        return bitcast<f32>(w[o + i]);
    }
    let word = w[o + (i >> 1u)];
    let h = (word >> (16u * (i & 1u))) & 0xffffu;
    if (SCALE_TYPE == 1u) {
        return f16_bits_to_f32(h);
    }
    return bitcast<f32>(h << 16u);
}

// The per-tensor scale of tile row `row` of the part (mode bit 5: gate/up pairs, two scales by
// row parity): the one-group GEMMs (ternary_gemm_t128.wgsl, ternary_gemm_coop.wgsl).
fn tensor_scale(row: u32) -> f32 {
    return scale_at(select(0u, (p.row0 + row) & 1u, ((p.mode >> 5u) & 1u) == 1u));
}

// Scale g of tile row `row` of the part (0 past the part's rows): the GEMMs' GROUPED variants
// (ternary_gemm_t128.wgsl, ternary_gemm_coop.wgsl).
fn group_scale(row: u32, g: u32) -> f32 {
    if (row >= p.rows) {
        return 0.0;
    }
    return scale_at(row * p.groups_per_row + g);
}

// Four 2-bit codes (bits 8b .. 8b + 8 of cw) as four int8 trits (code − 1) in one word.
fn trits2(cw: u32, b: u32) -> u32 {
    let c = (cw >> (8u * b)) & 0xffu;
    let x = (c & 3u) | ((c << 6u) & 0x300u) | ((c << 12u) & 0x30000u) | ((c << 18u) & 0x3000000u);
    // Per byte v ∈ {0, 1, 2}: ((v | 0x80) − 1) ^ 0x80 = v − 1 as int8, no borrow between bytes.
    return ((x | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}
