// The RMSNorm multiplier 1 / sqrt(mean(x²) + eps) of the row of `n` values at element `base`,
// returned to every invocation. rmsnorm.wgsl's arithmetic, imported by rmsnorm.wgsl and by
// ggml_gemv.wgsl (its fused float-norm prologue, issue 15) so that both compute the same bits:
// invocation lid sums x² over the columns lid, lid + WG, … in increasing order (four independent
// loads per loop trip, added in that order: the same sum as one load per trip), then the WG-way
// tree over `partial` (halves WG / 2 … 1, lane i += lane i + h).
// The including kernel defines `const WG: u32 = 256u`, `var<workgroup> partial: array<f32, 256>`
// and `fn x_at(i: u32) -> f32` (element i of its x binding). Every invocation calls it
// (workgroup-uniform control flow; `live` false: the invocation adds nothing). The result is read
// from `partial` after the last barrier: a caller writing `partial` again needs a barrier first.
fn rms_scale(lid: u32, base: u32, n: u32, eps: f32, live: bool) -> f32 {
    var ss = 0.0;
    if (live) {
        var c = lid;
        for (; c + 3u * WG < n; c = c + 4u * WG) {
            let v0 = x_at(base + c);
            let v1 = x_at(base + c + WG);
            let v2 = x_at(base + c + 2u * WG);
            let v3 = x_at(base + c + 3u * WG);
            ss = ss + v0 * v0;
            ss = ss + v1 * v1;
            ss = ss + v2 * v2;
            ss = ss + v3 * v3;
        }
        for (; c < n; c = c + WG) {
            let v = x_at(base + c);
            ss = ss + v * v;
        }
    }
    partial[lid] = ss;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            partial[lid] = partial[lid] + partial[lid + st];
        }
        workgroupBarrier();
    }
    return 1.0 / sqrt(partial[0] / f32(n) + eps);
}
