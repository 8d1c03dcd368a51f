// Row loads of the fused RMSNorm + quantizer kernels. The importer declares the bindings `x`,
// `weight` and `override NORM` (1: the RMSNorm is fused).
// #import ordered_sum

fn val(base: u32, c: u32, r: f32) -> f32 {
    if (NORM == 1u) {
        return x[base + c] * r * weight[c];
    }
    return x[base + c];
}

// x[base + c], or 0 past the row.
fn ldx(base: u32, c: u32, n: u32) -> f32 {
    if (c < n) {
        return x[base + c];
    }
    return 0.0;
}

// weight[c] (NORM = 1), or 0 past the row.
fn ldw(c: u32, n: u32) -> f32 {
    if (NORM == 1u && c < n) {
        return weight[c];
    }
    return 0.0;
}

// y of one column from its loaded x and weight.
fn yof(xv: f32, r: f32, wv: f32) -> f32 {
    if (NORM == 1u) {
        return opq(xv * r) * wv;
    }
    return xv;
}
