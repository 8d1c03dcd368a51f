// NaN test on f32 bits (integer ops: exact whatever the driver does with float NaN).

fn is_nan_bits(b: u32) -> bool {
    return (b & 0x7fffffffu) > 0x7f800000u;
}
