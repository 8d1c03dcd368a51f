// The ternary matmuls' parameter uniform (GEMV, wide, decode, sparse and both GEMMs), mirrored by
// tern-gpu's `TernaryParams` (device/params.rs checks the layout with naga).

struct Params {
    rows: u32,
    cols: u32,
    words_per_row: u32,
    group: u32,
    groups_per_row: u32,
    scale_word_offset: u32,
    act_stride: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    sparse_max_words: u32,
    mode: u32,
    eps: f32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
}
