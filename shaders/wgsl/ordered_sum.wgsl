// Float sums rounded in the order written (opq / ad). The importer sets `zb` to a runtime zero
// at the top of its entry point.

// A runtime zero the compiler cannot see through (set by the entry point from a parameter the
// launcher keeps below 2^31, e.g. `zb = p.n >> 31u`).
var<private> zb: u32;

// v as computed. SPIR-V lets a driver reassociate and regroup float arithmetic that carries no
// NoContraction decoration (naga emits none), and straight-line sums invite it; passing every
// partial result through an OR with an unknown zero pins the order written here (the
// reference's), at one integer op each. (The loops of the long-row path carry their order.)
fn opq(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) | zb);
}

// a + b, rounded as written (opq).
fn ad(a: f32, b: f32) -> f32 {
    return opq(a + b);
}
