// Greedy sampling: index of the largest logit of each row, the first one on ties; NaN entries are
// skipped (a row of NaNs gives 0). Exact (integer result, order-free rule).
// Bindings: logits [n_rows][n] f32; out [n_rows] u32.

// #import common

struct Params {
    n: u32,
    n_rows: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

const WG: u32 = 256u;
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return bi == 0xffffffffu || v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    var bv = 0.0;
    var bi = 0xffffffffu;
    if (row < p.n_rows) {
        for (var c = lid; c < p.n; c = c + WG) {
            let v = logits[row * p.n + c];
            let nan = (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
            if (!nan && better(v, c, bv, bi)) {
                bv = v;
                bi = c;
            }
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            let ov = best_v[lid + st];
            let oi = best_i[lid + st];
            if (oi != 0xffffffffu && better(ov, oi, best_v[lid], best_i[lid])) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u && row < p.n_rows) {
        out[row] = select(best_i[0], 0u, best_i[0] == 0xffffffffu);
    }
}
