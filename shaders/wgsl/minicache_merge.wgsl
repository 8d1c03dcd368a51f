// MiniCache merge of a pair of layers (a, b) for one batch, keys or values (the design of
// tern_reference::kv, "MiniCache"; the math of tern_reference::kv_merge::slerp_merge):
// per (position p, kv head h), with x_a, x_b the two layers' head_dim vectors, u = x / ‖x‖,
// θ = acos(clamp(u_a·u_b, −1, 1)), d = θ / π: the direction
//   e = (sin((1 − t)θ)·u_a + sin(tθ)·u_b) / sin θ   (linear blend when sin θ < 1e-6),
// mag[p][0][h] = f16(‖x_a‖), mag[p][1][h] = f16(‖x_b‖); a pair with d > γ is retained (while the
// pool has room): the direction is u_a, layer b's raw vector goes to the pool (f16) at the next
// slot, its position to pool_pos, and mag[p][1][h] = 0x8000 | slot. Slots are given in
// (position, head) order, so one workgroup does the batch, a chunk of whole positions at a time
// (a workgroup prefix sum of the retention flags gives the slots); head_dim is even. The pool's count is first cut
// back to the entries before p0 (a pass that failed or was truncated left later ones).
// The directions go to `dir` ([n_tokens][row] f32), which kv_store then stores in the cache's
// format into the pair's buffer; magnitudes, pool, positions and count are written here.
// Bindings: geom (the pair buffer's layout, kv_store.wgsl's Geom); step; merge (t, γ);
// xa (layer a's rows from word xa_off), xb [n_tokens][row] f32; dir [n_tokens][row] f32; cache (the pair's K or V buffer).

// #import common
// #import kv_step
// #import f16_sat

struct Merge {
    t: f32,
    gamma: f32,
    // word offset of layer a's rows in xa
    xa_off: u32,
    // cos(γπ): θ/π > γ ⟺ cos θ < cos(γπ), decided on the dot product (acos differs between
    // drivers by more than the CPU's rounding; the dot product does not)
    cos_gamma: f32,
}

@group(0) @binding(0) var<uniform> g: Geom;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<uniform> mp: Merge;
@group(0) @binding(3) var<storage, read> xa: array<f32>;
@group(0) @binding(4) var<storage, read> xb: array<f32>;
@group(0) @binding(5) var<storage, read_write> dir: array<f32>;
@group(0) @binding(6) var<storage, read_write> cache: array<u32>;

const WG: u32 = 256u;

var<workgroup> scan: array<u32, 256>;
var<workgroup> m0: array<u32, 256>;
var<workgroup> m1: array<u32, 256>;
var<workgroup> base: u32;

// acos and sin to ~1 ulp in f32 (Cephes acosf/asinf/sinf), the same on every driver: WGSL's
// built-ins are approximations (lavapipe's differ from the CPU's libm by ~1e-5, enough to move
// the merged directions of nearly parallel vectors visibly).
const PIO2: f32 = 1.5707963267948966;
const PI_F: f32 = 3.141592653589793;

fn asin_c(x: f32) -> f32 {
    let a = abs(x);
    var z: f32;
    var y: f32;
    let big = a > 0.5;
    if (big) {
        z = 0.5 * (1.0 - a);
        y = sqrt(z);
    } else {
        y = a;
        z = a * a;
    }
    var p = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z
        + 7.4953002686e-2) * z + 1.6666752422e-1) * z * y + y;
    if (big) {
        p = PIO2 - (p + p);
    }
    return select(p, -p, x < 0.0);
}

fn acos_c(x: f32) -> f32 {
    if (x < -0.5) {
        return PI_F - 2.0 * asin_c(sqrt(0.5 * (1.0 + x)));
    }
    if (x > 0.5) {
        return 2.0 * asin_c(sqrt(0.5 * (1.0 - x)));
    }
    return PIO2 - asin_c(x);
}

// sin of x ≥ 0 (Cephes sinf: reduction by π/4 in three parts, then the sin or cos polynomial)
fn sin_c(x: f32) -> f32 {
    var j = u32(x * 1.27323954473516);
    var y = f32(j);
    if ((j & 1u) == 1u) {
        j = j + 1u;
        y = y + 1.0;
    }
    j = j & 7u;
    var sgn = 1.0;
    if (j > 3u) {
        sgn = -1.0;
        j = j - 4u;
    }
    let z = ((x - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
    let zz = z * z;
    var r: f32;
    if (j == 1u || j == 2u) {
        r = ((2.443315711809948e-5 * zz - 1.388731625493765e-3) * zz + 4.166664568298827e-2)
            * zz * zz - 0.5 * zz + 1.0;
    } else {
        r = ((-1.9515295891e-4 * zz + 8.3321608736e-3) * zz - 1.6666654611e-1) * zz * z + z;
    }
    return sgn * r;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    let heads = g.heads;
    let hd = g.head_dim;
    let n = min(g.n_tokens, g.n_ctx - min(step.p0, g.n_ctx));
    if (lid == 0u) {
        // entries before p0 (positions in order): binary search
        var lo = 0u;
        var hi = min(cache[g.count], g.cap);
        while (lo < hi) {
            let mid = (lo + hi) / 2u;
            if (cache[g.pool_pos + mid] < step.p0) {
                lo = mid + 1u;
            } else {
                hi = mid;
            }
        }
        base = lo;
    }
    workgroupBarrier();
    // whole positions per chunk (heads ≤ 256, checked by the launcher)
    let per = WG / heads;
    let chunk = per * heads;
    let total = n * heads;
    for (var c0 = 0u; c0 < total; c0 = c0 + chunk) {
        let e = c0 + lid;
        let live = lid < chunk && e < total;
        var wants = 0u;
        var na = 0.0;
        var nb = 0.0;
        var wa = 0.0;
        var wb = 0.0;
        var ia = 0.0;
        var ib = 0.0;
        var o = 0u;
        if (live) {
            let i = e / heads;
            let h = e % heads;
            o = i * g.row + h * hd;
            var sa = 0.0;
            var sb = 0.0;
            for (var k = 0u; k < hd; k = k + 1u) {
                sa = sa + xa[mp.xa_off + o + k] * xa[mp.xa_off + o + k];
                sb = sb + xb[o + k] * xb[o + k];
            }
            na = sqrt(sa);
            nb = sqrt(sb);
            ia = select(0.0, 1.0 / na, na > 0.0);
            ib = select(0.0, 1.0 / nb, nb > 0.0);
            var cs = 0.0;
            for (var k = 0u; k < hd; k = k + 1u) {
                cs = cs + (xa[mp.xa_off + o + k] * ia) * (xb[o + k] * ib);
            }
            let theta = acos_c(clamp(cs, -1.0, 1.0));
            let sn = sin_c(theta);
            if (sn < 1e-6) {
                wa = 1.0 - mp.t;
                wb = mp.t;
            } else {
                wa = sin_c((1.0 - mp.t) * theta) / sn;
                wb = sin_c(mp.t * theta) / sn;
            }
            wants = select(0u, 1u, clamp(cs, -1.0, 1.0) < mp.cos_gamma);
        }
        scan[lid] = wants;
        workgroupBarrier();
        // inclusive prefix sum (Hillis–Steele)
        for (var s = 1u; s < WG; s = s * 2u) {
            var add = 0u;
            if (lid >= s) {
                add = scan[lid - s];
            }
            workgroupBarrier();
            scan[lid] = scan[lid] + add;
            workgroupBarrier();
        }
        let slot = base + scan[lid] - wants;
        let retain = wants == 1u && slot < g.cap;
        if (live) {
            let p = step.p0 + e / heads;
            m0[lid] = f16_sat(na);
            if (retain) {
                for (var k = 0u; k < hd; k = k + 1u) {
                    dir[o + k] = xa[mp.xa_off + o + k] * ia;
                }
                // pool entry: hd halves (head_dim is even: whole words) from word slot·hd/2
                let w0 = g.pool + slot * (hd / 2u);
                for (var k = 0u; k < hd; k = k + 2u) {
                    cache[w0 + k / 2u] = f16_sat(xb[o + k]) | (f16_sat(xb[o + k + 1u]) << 16u);
                }
                cache[g.pool_pos + slot] = p;
                m1[lid] = 0x8000u | slot;
            } else {
                for (var k = 0u; k < hd; k = k + 1u) {
                    dir[o + k] = wa * (xa[mp.xa_off + o + k] * ia) + wb * (xb[o + k] * ib);
                }
                m1[lid] = f16_sat(nb);
            }
        }
        workgroupBarrier();
        // magnitudes: position p's [2][heads] halves are `heads` whole words
        if (live) {
            let pi = lid / heads;
            let w = lid % heads;
            var bits = 0u;
            for (var k = 0u; k < 2u; k = k + 1u) {
                let hx = 2u * w + k;
                let sel = hx / heads;
                let hh = hx % heads;
                let v = select(m0[pi * heads + hh], m1[pi * heads + hh], sel == 1u);
                bits = bits | (v << (16u * k));
            }
            cache[g.mag + (step.p0 + c0 / heads + pi) * heads + w] = bits;
        }
        let last = min(chunk, total - c0);
        if (lid == 0u) {
            base = min(base + scan[last - 1u], g.cap);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        cache[g.count] = base;
    }
}
