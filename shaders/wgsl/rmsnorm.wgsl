// RMSNorm over rows: out = x / sqrt(mean(x²) + eps) · weight (tern_reference::rmsnorm).
// One workgroup per row; the sum of squares is a tree reduction (a different f32 order than the
// reference's sequential sum: NMSE ~1e-14).
// Bindings: x [n_rows][n] f32; weight [n] f32; out [n_rows][n] f32.
//
// Latency (issue 15): at decode (one row, one workgroup) the sum of squares issues four
// independent loads per loop trip (scalars, no private array), combined in the same order as one
// load per trip (invocation lid: columns lid, lid + 256, … in increasing order, then the 256-way
// tree), so the bits are the same.

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
var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let base = row * p.n;
    let n = p.n;
    var ss = 0.0;
    if (in_range) {
        var c = lid;
        for (; c + 3u * WG < n; c = c + 4u * WG) {
            let v0 = x[base + c];
            let v1 = x[base + c + WG];
            let v2 = x[base + c + 2u * WG];
            let v3 = x[base + c + 3u * WG];
            ss = ss + v0 * v0;
            ss = ss + v1 * v1;
            ss = ss + v2 * v2;
            ss = ss + v3 * v3;
        }
        for (; c < n; c = c + WG) {
            let v = x[base + c];
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
    let scale = 1.0 / sqrt(partial[0] / f32(n) + p.eps);
    if (in_range) {
        for (var c = lid; c < n; c = c + WG) {
            out[base + c] = x[base + c] * scale * weight[c];
        }
    }
}
