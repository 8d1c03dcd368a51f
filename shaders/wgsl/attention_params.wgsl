// The attention kernels' parameter uniform (decode, prefill and the split-K combine), mirrored by
// tern-gpu's params.rs.

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    scale: f32,
    n_tokens: u32,
    n_split: u32,
    n_hg: u32,
    q_stride: u32,
    // Sliding window: a query sees at most this many keys, itself included (0: the whole past).
    window: u32,
    _pad1: u32,
    _pad2: u32,
}
