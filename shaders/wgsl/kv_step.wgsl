// The per-step uniform of the KV-cache kernels (the batch's first position and length), written
// once per step by tern-gpu (`StepParams`).

struct Step {
    p0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}
