// f32 → f16 bits, saturated to ±65504 (the KV cache's f16 rows).
// #import common

// f16 bits of x, saturated to ±65504 (the spec's f16 of a stored value, scale or zero point)
fn f16_sat(x: f32) -> u32 {
    return f32_to_f16_bits(clamp(x, -65504.0, 65504.0));
}
