// NeuZip row decoding shared by neuzip_gemv.wgsl and neuzip_embed.wgsl (appended to both):
// the chunk Params (`neuzip_decode.wgsl`'s), the rANS decode table built in workgroup memory, the
// stream readers and the element conversion, exactly as `neuzip_decode.wgsl` decodes. The kernel
// declares `p` (Params), `meta_` (array<atomic<u32>>) and `data` (array<u32>).

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
    group: u32,
    bpw: u32,
    b_end: u32,
    status_word: u32,
    whole_words: u32,
}

var<workgroup> lut: array<u32, 2048>;
var<workgroup> cdf: array<u32, 257>;

fn lane_start(b: u32, l: u32) -> u32 {
    let i = b * p.lanes + l;
    return (atomicLoad(&meta_[p.lane_starts_word + (i >> 1u)]) >> (16u * (i & 1u))) & 0xffffu;
}

fn word(k: u32) -> u32 {
    let kk = k - p.words_base;
    return (data[kk >> 1u] >> (16u * (kk & 1u))) & 0xffffu;
}

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

// Exponent symbol + raw field of element j → the element as f32 (bit-exact conversion).
fn value(sym: u32, j: u32) -> f32 {
    let f = raw_field(j);
    let sign = (f >> p.k) & 1u;
    let kept = f & ((1u << p.k) - 1u);
    let bits = (sign << (p.man + p.exp_bits)) | (sym << p.man) | (kept << (p.man - p.k));
    if (p.width == 32u) {
        return bitcast<f32>(bits);
    }
    if (p.man == 10u) {
        return f16_bits_to_f32(bits);
    }
    return bitcast<f32>(bits << 16u);
}

// Decode table from the blob's frequency table: the running cdf (invocation 0, at most 256
// entries), then every invocation of the 256 fills 8 slots, finding each slot's symbol by
// binary search. Call from uniform control flow (it has barriers).
fn build_table(lid: u32) {
    if (lid == 0u) {
        var c = 0u;
        for (var i = 0u; i < p.n_syms; i = i + 1u) {
            cdf[i] = c;
            c = c + ((atomicLoad(&meta_[p.table_word + i]) >> 16u) & 0xfffu);
        }
        cdf[p.n_syms] = c;
    }
    workgroupBarrier();
    for (var sl = lid; sl < 2048u; sl = sl + 256u) {
        var lo = 0u;
        var hi = p.n_syms;
        while (hi - lo > 1u) {
            let mid = (lo + hi) / 2u;
            if (cdf[mid] <= sl) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let e = atomicLoad(&meta_[p.table_word + lo]);
        lut[sl] = ((sl - cdf[lo]) << 20u) | (((e >> 16u) & 0xfffu) << 8u) | (e & 0xffu);
    }
    workgroupBarrier();
}
