// The activation quantizers' rounding of one value: round(v · s) clamped to [lo, hi], NaN → 0
// (the reference's rule).
// #import nan_bits

fn quant(v: f32, s: f32, lo: f32, hi: f32) -> i32 {
    let prod = v * s;
    if (is_nan_bits(bitcast<u32>(prod))) {
        return 0;
    }
    return i32(clamp(round(prod), lo, hi));
}
