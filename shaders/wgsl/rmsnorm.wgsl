// RMSNorm over rows: out = x / sqrt(mean(x²) + eps) · weight (tern_reference::rmsnorm).
// One workgroup per row; the sum of squares is a tree reduction (a different f32 order than the
// reference's sequential sum: NMSE ~1e-14).
// Bindings: x [n_rows][n] f32; weight [n] f32; out [n_rows][n] f32.
//
// Latency (issue 15): at decode (one row, one workgroup) each pass issues UNROLL independent
// loads per invocation before using them (constant-bound inner loops), instead of one dependent
// load per loop trip; the values are combined in the same order as before (invocation lid sums
// columns lid, lid + 256, … in increasing order, then the 256-way tree), so the bits are the same.

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
const UNROLL: u32 = 8u;
var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let base = row * p.n;
    let n = p.n;
    var ss = 0.0;
    if (in_range) {
        for (var c0 = lid; c0 < n; c0 = c0 + UNROLL * WG) {
            var xv: array<f32, UNROLL>;
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                let c = c0 + k * WG;
                xv[k] = 0.0;
                if (c < n) {
                    xv[k] = x[base + c];
                }
            }
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                if (c0 + k * WG < n) {
                    let v = xv[k];
                    ss = ss + v * v;
                }
            }
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
    let scale = 1.0 / sqrt(partial[0] / f32(n) + p.eps);
    if (in_range) {
        for (var c0 = lid; c0 < n; c0 = c0 + UNROLL * WG) {
            var xv: array<f32, UNROLL>;
            var wv: array<f32, UNROLL>;
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                let c = c0 + k * WG;
                xv[k] = 0.0;
                wv[k] = 0.0;
                if (c < n) {
                    xv[k] = x[base + c];
                    wv[k] = weight[c];
                }
            }
            for (var k = 0u; k < UNROLL; k = k + 1u) {
                let c = c0 + k * WG;
                if (c < n) {
                    out[base + c] = xv[k] * scale * wv[k];
                }
            }
        }
    }
}
