// INT4 activations (BitNet a4.8, 8 per u32) widened to int8 bytes in registers.

// Four nibbles (one in the low half of each byte) sign-extended to int8 bytes: a byte with bit 3
// set gets 0xf0 or-ed in ((v & 8) · 0x1e = 0xf0 per byte, no carry between bytes).
fn sext4_or(v: u32) -> u32 {
    return v | ((v & 0x08080808u) * 0x1eu);
}
