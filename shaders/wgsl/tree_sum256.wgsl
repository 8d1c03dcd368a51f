// The 256-invocation tree sum in the reference's order (halves 128 … 1). The importer declares
// `var<workgroup> red: array<f32, 256>` and `var<workgroup> red32: array<f32, 32>`.
// #import ordered_sum

// Lane l (< 4) of red32's 32 lane sums after the halves 16, 8 and 4.
fn f4(l: u32) -> f32 {
    return ad(
        ad(ad(red32[l], red32[l + 16u]), ad(red32[l + 8u], red32[l + 24u])),
        ad(ad(red32[l + 4u], red32[l + 20u]), ad(red32[l + 12u], red32[l + 28u])),
    );
}

// Σ over the invocations' v in the order of the halves 128 … 1 (lane i += lane i + h), returned
// to every invocation; two barriers. Every invocation must call it; `red` and `red32` may be
// reused by the next call (its first write to each follows a barrier that every read of this
// call precedes).
fn tree_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    if (lid < 32u) {
        // lane lid after the halves 128, 64, 32
        let a0 = ad(red[lid], red[lid + 128u]);
        let a1 = ad(red[lid + 64u], red[lid + 192u]);
        let a2 = ad(red[lid + 32u], red[lid + 160u]);
        let a3 = ad(red[lid + 96u], red[lid + 224u]);
        red32[lid] = ad(ad(a0, a1), ad(a2, a3));
    }
    workgroupBarrier();
    // the halves 16, 8, 4 (f4), 2, 1
    return ad(ad(f4(0u), f4(2u)), ad(f4(1u), f4(3u)));
}
