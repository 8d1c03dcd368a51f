// How attention.wgsl reads its cache: every format of kv_store.wgsl's layout dequantized one
// value at a time in registers (kget / vget: f16 halves, codes × scale (+ min), the KIVI window's
// f16 rows, MiniCache's magnitude · direction; the rotated formats' values in the rotated space), split from the kernel so that attention.wgsl is
// the tiled online softmax. The importer (attention.wgsl) binds `p`, `step`, `q`, `kc`, `vc` and
// `g` (Geom) and sets `qend` at the start of main.
// #import common
// #import kv_step
// #import kv_formats

// MiniCache: 0 a layer of its own; 1 the first layer (a) of a merged pair: positions < p0 are
// mag[p][0][h] · direction, the batch's own positions its unmerged rows, which follow the
// queries in `q` (keys [n_tokens][row] from word g.pend, then the values); 2 the second
// (b): mag[p][1][h] · direction, or the pool's f16 row when mag[p][1][h] = 0x8000 | slot.
override MC: u32 = 0u;
// KIVI formats only: 1 = the word path below (a code word per invocation, the query folded into
// the key group's scales, values through the tile's folded parameters): fewer loads and
// instructions per key, more dependent phases per tile — the launcher takes it where one
// workgroup runs over all of a token's keys (n_split = 1), the per-channel path (0) otherwise.
override WORDS: u32 = 0u;

fn word_path() -> bool {
    return is_kivi() && WORDS == 1u;
}

// Positions held in the stream being read: p0 + n_tokens after this batch's store, but only p0
// for a pair's first layer (the pair's stream gets this batch when layer b merges it).
fn held() -> u32 {
    if (MC == 1u) {
        return step.p0;
    }
    return n_held();
}

// MiniCache: this layer's magnitude bits of (j, h) from the word `mag_word` names (position j's
// [2][heads] halves are `heads` words from g.mag).
fn mc_bits(word: u32, j: u32, h: u32) -> u32 {
    let hx = select(0u, g.heads, MC == 2u) + h;
    return (word >> ((hx & 1u) * 16u)) & 0xffffu;
}

fn mag_word(j: u32, h: u32) -> u32 {
    let hx = select(0u, g.heads, MC == 2u) + h;
    return g.mag + j * g.heads + (hx >> 1u);
}

fn fmt_bits() -> u32 {
    switch FMT {
        case FMT_Q8: { return 8u; }
        case FMT_Q4, FMT_A4, FMT_Q4R: { return 4u; }
        case FMT_Q3, FMT_A3, FMT_Q3R: { return 3u; }
        default: { return 2u; }
    }
}

fn is_kivi() -> bool {
    return FMT >= FMT_Q4 && FMT <= FMT_Q2;
}

// The code of channel c of position j (its row starts at word `base`), `bits` wide.
fn code_of(word: u32, c: u32, bits: u32) -> u32 {
    let cpw = select(32u / bits, 10u, bits == 3u);
    return (word >> ((c % cpw) * bits)) & ((1u << bits) - 1u);
}

fn word_index(c: u32, bits: u32) -> u32 {
    return c / select(32u / bits, 10u, bits == 3u);
}

// The rotated formats' code of channel c of a row: word rot_word(c) of the row (q3r: the row is
// one bit string, code c at bits 3c..3c+2, crossing into word rot_next(c) when it straddles; q4r
// and q2r: code_of's packing, rot_next = rot_word).
fn rot_word(c: u32) -> u32 {
    if (FMT == FMT_Q3R) {
        return (3u * c) / 32u;
    }
    return word_index(c, fmt_bits());
}

fn rot_next(c: u32) -> u32 {
    if (FMT == FMT_Q3R && (3u * c) % 32u > 29u) {
        return (3u * c) / 32u + 1u;
    }
    return rot_word(c);
}

fn rot_code(w: u32, next: u32, c: u32) -> u32 {
    if (FMT != FMT_Q3R) {
        return code_of(w, c, fmt_bits());
    }
    let sh = (3u * c) % 32u;
    let hi = select(0u, next << ((32u - sh) & 31u), sh > 29u);
    return ((w >> sh) | hi) & 7u;
}

fn half_at(w: u32, e: u32) -> f32 {
    return f16_bits_to_f32((w >> ((e & 1u) * 16u)) & 0xffffu);
}

fn code_base(j: u32) -> u32 {
    if (FMT == FMT_A3 && j > 0u) {
        return g.wpr0 + (j - 1u) * g.wpr;
    }
    return j * g.wpr;
}

// absmax: code → value (q8 signed bytes; a4/a3 unsigned with the qmax offset, a3's position 0
// at 4 bits)
fn absmax_value(word: u32, c: u32, j: u32, s: f32) -> f32 {
    if (FMT == FMT_Q8) {
        let b = code_of(word, c, 8u);
        return f32((i32(b << 24u)) >> 24u) * s;
    }
    let bits = select(fmt_bits(), 4u, FMT == FMT_A3 && j == 0u);
    let qmax = (1u << (bits - 1u)) - 1u;
    return (f32(code_of(word, c, bits)) - f32(qmax)) * s;
}

// The absmax scale of position j, kv head h, of the keys and of the values (WGSL cannot pass a
// storage pointer: two copies).
fn kscale(j: u32, h: u32) -> f32 {
    let e = j * g.heads + h;
    return half_at(kc[g.par + (e >> 1u)], e);
}

fn vscale(j: u32, h: u32) -> f32 {
    let e = j * g.heads + h;
    return half_at(vc[g.par + (e >> 1u)], e);
}

// j / G and j mod R, shifts when G and R are powers of two (the defaults 32 and 128; the
// condition is uniform, so the branch costs nothing)
fn div_group(j: u32) -> u32 {
    if ((g.group & (g.group - 1u)) == 0u) {
        return j >> countTrailingZeros(g.group);
    }
    return j / g.group;
}

fn mod_resid(j: u32) -> u32 {
    if ((g.resid & (g.resid - 1u)) == 0u) {
        return j & (g.resid - 1u);
    }
    return j % g.resid;
}

fn n_held() -> u32 {
    return min(step.p0 + g.n_tokens, g.n_ctx);
}

// KIVI: positions below this are quantized, the others in the f16 window (R·⌊held()/R⌋; set
// once at the start of main).
var<private> qend: u32;

// Key channel c (of the row) of position j, kv head h, as this layer reads it.
fn kget(j: u32, h: u32, c: u32) -> f32 {
    if (MC == 0u) {
        return kdir(j, h, c);
    }
    if (MC == 1u && j >= step.p0) {
        return q[g.pend + (j - step.p0) * g.row + c];
    }
    let bits = mc_bits(kc[mag_word(j, h)], j, h);
    if (MC == 2u && (bits & 0x8000u) != 0u) {
        let e = (bits & 0x7fffu) * g.head_dim + (c - h * g.head_dim);
        return half_at(kc[g.pool + (e >> 1u)], e);
    }
    return kdir(j, h, c) * f16_bits_to_f32(bits);
}

// Value channel c of position j, kv head h, as this layer reads it.
fn vget(j: u32, h: u32, c: u32) -> f32 {
    if (MC == 0u) {
        return vdir(j, h, c);
    }
    if (MC == 1u && j >= step.p0) {
        return q[g.pend + (g.n_tokens + j - step.p0) * g.row + c];
    }
    let bits = mc_bits(vc[mag_word(j, h)], j, h);
    if (MC == 2u && (bits & 0x8000u) != 0u) {
        let e = (bits & 0x7fffu) * g.head_dim + (c - h * g.head_dim);
        return half_at(vc[g.pool + (e >> 1u)], e);
    }
    return vdir(j, h, c) * f16_bits_to_f32(bits);
}

// Key channel c (of the row) of position j, kv head h, as stored (the format's decode).
fn kdir(j: u32, h: u32, c: u32) -> f32 {
    if (FMT == FMT_F32) {
        return bitcast<f32>(kc[j * g.row + c]);
    }
    if (FMT == FMT_F16) {
        let e = j * g.row + c;
        return half_at(kc[e >> 1u], e);
    }
    if (is_kivi()) {
        if (j >= qend) {
            let e = mod_resid(j) * g.row + c;
            return half_at(kc[g.k_win + (e >> 1u)], e);
        }
        let bits = fmt_bits();
        let sm = kc[g.par + div_group(j) * g.row + c];
        let q = code_of(kc[j * g.wpr + word_index(c, bits)], c, bits);
        return f32(q) * f16_bits_to_f32(sm & 0xffffu) + f16_bits_to_f32(sm >> 16u);
    }
    if (is_rot()) {
        let sm = kc[g.par + j * g.heads + h];
        let q = rot_code(kc[j * g.wpr + rot_word(c)], kc[j * g.wpr + rot_next(c)], c);
        return f32(q) * f16_bits_to_f32(sm & 0xffffu) + f16_bits_to_f32(sm >> 16u);
    }
    let bits = select(fmt_bits(), 4u, FMT == FMT_A3 && j == 0u);
    return absmax_value(kc[code_base(j) + word_index(c, bits)], c, j, kscale(j, h));
}

// Value channel c of position j, kv head h, as stored.
fn vdir(j: u32, h: u32, c: u32) -> f32 {
    if (FMT == FMT_F32) {
        return bitcast<f32>(vc[j * g.row + c]);
    }
    if (FMT == FMT_F16) {
        let e = j * g.row + c;
        return half_at(vc[e >> 1u], e);
    }
    if (is_kivi()) {
        if (j >= qend) {
            let e = mod_resid(j) * g.row + c;
            return half_at(vc[g.v_win + (e >> 1u)], e);
        }
        let bits = fmt_bits();
        let sm = vc[g.par + j * g.ngroups + div_group(c)];
        let q = code_of(vc[j * g.wpr + word_index(c, bits)], c, bits);
        return f32(q) * f16_bits_to_f32(sm & 0xffffu) + f16_bits_to_f32(sm >> 16u);
    }
    if (is_rot()) {
        let sm = vc[g.par + j * g.heads + h];
        let q = rot_code(vc[j * g.wpr + rot_word(c)], vc[j * g.wpr + rot_next(c)], c);
        return f32(q) * f16_bits_to_f32(sm & 0xffffu) + f16_bits_to_f32(sm >> 16u);
    }
    let bits = select(fmt_bits(), 4u, FMT == FMT_A3 && j == 0u);
    return absmax_value(vc[code_base(j) + word_index(c, bits)], c, j, vscale(j, h));
}
