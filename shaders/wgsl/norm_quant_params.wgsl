// The parameter uniform of the (optionally RMSNorm-fused) activation quantizers, mirrored by
// tern-gpu's params.rs.

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    q_stride: u32,
}
