// NeuZip's rANS stream: the parameter uniform and the word / raw-field readers shared by the
// decode pass and the fused row decoders. The importer binds `p: Params` and `data`.

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
