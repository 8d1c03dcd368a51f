// What the ggml-block matmuls (GEMV and tiled GEMM) share: their parameter uniform (mirrored by
// tern-gpu's params.rs) and f16 reads at byte offsets.
// #import common
// #import byte_load

struct Params {
    rows: u32,
    cols: u32,
    blocks_per_row: u32, // 32-column units per row (cols / 32)
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    mode: u32, // GEMV epilogue (ggml_gemv.wgsl's `store`); 0 in the GEMM
    eps: f32, // the fused norm's epsilon (NORM = 1); 0 in the GEMM
}

fn f16_at(off: u32) -> f32 {
    return f16_bits_to_f32(load32(off) & 0xffffu);
}
