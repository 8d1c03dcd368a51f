// The KV cache formats, named once: each constant is `tern_format::KvQuant::index()` of its
// format (tern-gpu's registry test checks that), and `FMT` (the KV kernels' override, set by
// `KernelKey::constants`) is one of them. KIVI: q4, q3, q2; absmax: q8, a4, a3; rotated: q4r,
// q3r, q2r.

const FMT_F32: u32 = 0u;
const FMT_F16: u32 = 1u;
const FMT_Q8: u32 = 2u;
const FMT_Q4: u32 = 3u;
const FMT_Q3: u32 = 4u;
const FMT_Q2: u32 = 5u;
const FMT_A4: u32 = 6u;
const FMT_A3: u32 = 7u;
// Rotated (issue 28): each kv head rotated by H = c·W·diag(σ) (tern_format::kv), then min-max per
// (position, kv head); the store rotates keys and values (kv_quant.wgsl's stage_rot), attention
// rotates the queries and applies Hᵀ to each head's output (attention.wgsl).
const FMT_Q4R: u32 = 8u;
const FMT_Q3R: u32 = 9u;
const FMT_Q2R: u32 = 10u;

// The cache's format: one of the FMT_* above.
override FMT: u32 = 0u;

fn is_rot() -> bool {
    return FMT >= FMT_Q4R && FMT <= FMT_Q2R;
}

// The rotated formats' sign σ_i = −1 (tern_format::kv::rot_sign with ROT_SEED 0x7E2A1C05: bit 0 of
// the lowbias32 hash of seed ^ i·0x9E3779B9, wrapping u32 arithmetic).
fn rot_neg(i: u32) -> bool {
    var x = 0x7E2A1C05u ^ (i * 0x9E3779B9u);
    x = x ^ (x >> 16u);
    x = x * 0x7FEB352Du;
    x = x ^ (x >> 15u);
    x = x * 0x846CA68Bu;
    x = x ^ (x >> 16u);
    return (x & 1u) == 1u;
}
