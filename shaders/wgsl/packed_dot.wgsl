// The 4-byte integer dot product of the integer kernels: `dot4I8Packed` (DOT = 1) or
// common.wgsl's exact byte-by-byte `dot4_plain` (DOT = 0). The importer declares `override DOT`.
// #import common

// The 4-byte int8 dot product: a DP4A instruction where the adapter has the packed integer dot
// product, the exact byte-by-byte sum elsewhere (same integers).
fn dot4(a: u32, b: u32) -> i32 {
    if (DOT == 1u) {
        return dot4I8Packed(a, b);
    }
    return dot4_plain(a, b);
}
