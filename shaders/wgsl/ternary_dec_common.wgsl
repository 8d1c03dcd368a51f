// Shared by ternary_gemv_dec.wgsl and ternary_gemv_dec_norm.wgsl (both
// import it): code bytes as trit bytes, the 16-column INT8 dot, and the per-group integer
// sums of a lane's chunks. The kernel declares `p` (`group`, `groups_per_row`), `gsum`
// (array<atomic<i32>>), `TPR` (lanes per row) and `dot4`.

// Byte k of code word cw (4 codes, code = trit + 1 at bits 2j) as 4 trit bytes (int8 −1, 0, 1).
fn trits(cw: u32, k: u32) -> u32 {
    let b = (cw >> (8u * k)) & 0xffu;
    let s = b | (b << 6u);
    let codes = (s | (s << 12u)) & 0x03030303u;
    return (codes + 0x7f7f7f7fu) ^ 0x80808080u;
}

// Σ trit · act of code word cw with its 16 INT8 activations a.
fn word8(cw: u32, a: vec4<u32>) -> i32 {
    return dot4(trits(cw, 0u), a.x) + dot4(trits(cw, 1u), a.y) + dot4(trits(cw, 2u), a.z)
        + dot4(trits(cw, 3u), a.w);
}

// Chunk u's sum d into the lane's running sum `acc` of group `cur`, flushed into gsum when the
// group changes (chunks come in increasing order per lane).
fn take(d: i32, u: u32, lrow: u32, acc: ptr<function, i32>, cur: ptr<function, u32>) {
    var g = 0u;
    if (p.group != 0u) {
        g = (u * 64u) / p.group;
    }
    if (g != *cur) {
        atomicAdd(&gsum[lrow * p.groups_per_row + *cur], *acc);
        *acc = 0;
        *cur = g;
    }
    *acc = *acc + d;
}

// The sums of one trip's chunks u, u + TPR, u + 2 TPR, u + 3 TPR (those below nv), in order.
fn take4(d: vec4<i32>, u: u32, nv: u32, lrow: u32, acc: ptr<function, i32>, cur: ptr<function, u32>) {
    take(d.x, u, lrow, acc, cur);
    if (u + TPR < nv) {
        take(d.y, u + TPR, lrow, acc, cur);
    }
    if (u + 2u * TPR < nv) {
        take(d.z, u + 2u * TPR, lrow, acc, cur);
    }
    if (u + 3u * TPR < nv) {
        take(d.w, u + 3u * TPR, lrow, acc, cur);
    }
}

fn scale_at(i: u32) -> f32 {
    let o = p.scale_word_offset + i / select(2u, 1u, SCALE_TYPE == 0u);
    let word = w[o >> 2u][o & 3u];
    if (SCALE_TYPE == 0u) {
        return bitcast<f32>(word);
    }
    let h = (word >> (16u * (i & 1u))) & 0xffffu;
    if (SCALE_TYPE == 1u) {
        return f16_bits_to_f32(h);
    }
    return bitcast<f32>(h << 16u);
}
