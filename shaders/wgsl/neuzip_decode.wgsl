// NeuZip decode (runtime/format/src/neuzip.rs, layout version 1): rANS-coded exponents in
// independent interleaved lanes, merged with the raw sign+mantissa plane. Bit-exact with
// `tern_format::neuzip::decode`: each invocation runs `rans::decode_lane`'s step verbatim.
//
// One workgroup per block, invocation l = lane l (lanes ≤ 64). The 2048-entry decode table
// `lut[s] = (s − cdf) << 20 | pdf << 8 | sym` is built in workgroup memory (8 KiB) from the blob's
// frequency table. A lane that would read past its words, or does not end in state 2^15 having
// read exactly its words, sets `status` (the stream is corrupt); the host turns that into an error.
//
// Bindings:
//   meta   : the blob from byte 0 up to the word section (header, table, block word bases, states,
//            lane starts), as u32 words
//   data   : one chunk: words [words_base .. ) as u16 pairs from word 0, then (at u32 index
//            raw_word_offset) the raw plane from bit raw_bit_base on
//   out    : decoded elements from element out_base on: one per u32 (f32) or two per u32 (16-bit,
//            element i at bits 16·(i & 1)); must be zeroed before (16-bit halves are OR-ed in)
//   status : [0] = 0 when every lane of this dispatch ended cleanly, else 1

struct Params {
    lanes: u32,
    block_len: u32,
    blocks_per_row: u32,
    row_len: u32,
    n_elements: u32,
    b0: u32,
    n_syms: u32,
    table_word: u32,
    block_words_word: u32,
    states_word: u32,
    lane_starts_word: u32,
    words_base: u32,
    raw_word_offset: u32,
    raw_bit_base: u32,
    out_base: u32,
    man: u32,
    exp_bits: u32,
    k: u32,
    width: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> meta_: array<u32>;
@group(0) @binding(2) var<storage, read> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;

var<workgroup> lut: array<u32, 2048>;
var<workgroup> cdf: array<u32, 257>;

fn lane_start(b: u32, l: u32) -> u32 {
    let i = b * p.lanes + l;
    return (meta_[p.lane_starts_word + (i >> 1u)] >> (16u * (i & 1u))) & 0xffffu;
}

fn word(k: u32) -> u32 {
    let kk = k - p.words_base;
    return (data[kk >> 1u] >> (16u * (kk & 1u))) & 0xffffu;
}

// The (k + 1)-bit raw field of element i.
fn raw_field(i: u32) -> u32 {
    let wbits = p.k + 1u;
    let bit = i * wbits - p.raw_bit_base;
    let wi = p.raw_word_offset + (bit >> 5u);
    let sh = bit & 31u;
    var f = data[wi] >> sh;
    if (sh + wbits > 32u) {
        f = f | (data[wi + 1u] << (32u - sh));
    }
    return f & ((1u << wbits) - 1u);
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    // Decode table: running cdf (invocation 0, ≤ 256 entries), then each invocation fills the
    // slots of its symbols.
    if (lid == 0u) {
        var c = 0u;
        for (var i = 0u; i < p.n_syms; i = i + 1u) {
            cdf[i] = c;
            c = c + ((meta_[p.table_word + i] >> 16u) & 0xfffu);
        }
        cdf[p.n_syms] = c;
    }
    workgroupBarrier();
    for (var i = lid; i < p.n_syms; i = i + 64u) {
        let e = meta_[p.table_word + i];
        let sym = e & 0xffu;
        let pdf = (e >> 16u) & 0xfffu;
        let c0 = cdf[i];
        for (var s = c0; s < min(c0 + pdf, 2048u); s = s + 1u) {
            lut[s] = ((s - c0) << 20u) | (pdf << 8u) | sym;
        }
    }
    workgroupBarrier();

    let b = p.b0 + wg.x;
    let l = lid;
    if (l >= p.lanes) {
        return;
    }
    // Block span (Plan::block_span).
    var start = 0u;
    var limit = p.n_elements;
    if (p.blocks_per_row == 1u) {
        start = b * p.block_len;
    } else {
        let row = b / p.blocks_per_row;
        start = row * p.row_len + (b % p.blocks_per_row) * p.block_len;
        limit = (row + 1u) * p.row_len;
    }
    let len = min(limit - start, p.block_len);
    let base = meta_[p.block_words_word + b];
    let k0 = base + lane_start(b, l);
    var kend = meta_[p.block_words_word + b + 1u];
    if (l + 1u < p.lanes) {
        kend = base + lane_start(b, l + 1u);
    }
    var x = meta_[p.states_word + b * p.lanes + l];
    var k = k0;
    var bad = false;
    let sign_shift = p.man + p.exp_bits;
    for (var j = start + l; j < start + len; j = j + p.lanes) {
        // rans::decode_lane, one step.
        let e = lut[x & 0x7ffu];
        let sym = e & 0xffu;
        x = ((e >> 8u) & 0xfffu) * (x >> 11u) + (e >> 20u);
        if (x < 0x8000u) {
            if (k >= kend) {
                bad = true;
                break;
            }
            x = (x << 16u) | word(k);
            k = k + 1u;
        }
        // Merge with the raw field (neuzip float::merge).
        let f = raw_field(j);
        let sign = (f >> p.k) & 1u;
        let kept = f & ((1u << p.k) - 1u);
        let bits = (sign << sign_shift) | (sym << p.man) | (kept << (p.man - p.k));
        let o = j - p.out_base;
        if (p.width == 32u) {
            atomicStore(&out[o], bits);
        } else {
            atomicOr(&out[o >> 1u], bits << (16u * (o & 1u)));
        }
    }
    if (bad || x != 0x8000u || k != kend) {
        atomicStore(&status[0], 1u);
    }
}
