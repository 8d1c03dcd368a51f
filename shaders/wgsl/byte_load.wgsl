// Unaligned little-endian reads of byte-packed blocks. The importer binds `w: array<u32>`.

// The 4 bytes at byte offset `off` as a little-endian u32.
fn load32(off: u32) -> u32 {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    let lo = w[i];
    if (sh == 0u) {
        return lo;
    }
    return (lo >> sh) | (w[i + 1u] << (32u - sh));
}
