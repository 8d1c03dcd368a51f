// BitNet a4.8's TopK 50% + INT8 absmax activation quantizer (topk50_int8), bit-exact with
// tern_reference::quant, optionally fused with the preceding RMSNorm (NORM = 1: y_c = x_c · r ·
// weight_c, the arithmetic of rmsnorm.wgsl / rmsnorm_quant.wgsl, the f32 row not written; NORM = 0:
// y = x, `weight` unused). The INT4 absmean quantizer is act_quant_a48.wgsl.
//
// k = ⌊n/2⌋ entries kept by the reference's tie rule: key(v) = bits(|v|) + 1 (NaN: 0); T = the
//   k-th largest key; r = how many entries with key == T are still to keep; keep key > T, and
//   key == T for the first r in index order. s = div_rn(127, max(amax, 1e-5)) with amax the
//   largest non-NaN |y| (always kept when k ≥ 1; 0 when k = 0); q_c = clamp(round(y_c · s), −128,
//   127) for kept entries, 0 otherwise. Packed 4 per u32 as act_quant_int8.wgsl.
//
// The threshold: a radix select over key ranges, 1024 bins per pass. Pass 0 bins the 2^26 keys
//   (8 binary octaves) below the row's largest key, 1/128 octave per bin, so a real row's values
//   spread over many bins (few atomics on one address) and the bin holding the k-th largest has
//   a handful of entries; if fewer than `want` keys lie in the window, the range below it is next.
//   Each later pass bins the chosen bin's range ((key − lo) >> shift, ≤ 1024 bins). The select
//   stops as soon as every entry of the chosen bin is to be kept (then every key ≥ the bin's lower
//   bound is kept: no index ranks needed — the usual case after two passes) or the range is one
//   key wide.
//   Only when some but not all entries equal to T are kept (ties straddling the cut) are ranks
//   needed: each invocation then owns a contiguous run of columns and an exclusive scan of their
//   tie counts gives each run its rank (the entries re-read from x).
//
// Rows of n ≤ R·256 = 3072 values are read (and normed) once and held in registers (invocation
// l holds columns l, l + 256, …: the reference's lane order for the sums); the packed words are
// assembled in workgroup memory (atomicOr of each column's bits) and written once. Longer rows
// re-read x (and the norm weight) in every pass.
//
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32 (NORM = 1);
// q [n_rows][q_stride] u32; s [n_rows] f32 multipliers (x ≈ q / s).

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    q_stride: u32,
}

override NORM: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
const R: u32 = 12u; // values per invocation held in registers (rows of n ≤ 3072)
const NB: u32 = 1024u; // radix bins per pass (4 per invocation)
const QW: u32 = 768u; // packed words staged in workgroup memory (3072 INT8 columns)
const WIN: u32 = 0x4000000u; // pass 0's window: 2^26 keys below the largest
const PASSES: u32 = 6u; // ≥ 1 (window) + 4 (31-bit range, ≥ 10 bits a pass) + 1
// Reductions (f32 as bits, halves 128 … 1) and the ping-pong suffix scan (two halves of 256).
var<workgroup> red: array<u32, 512>;
var<workgroup> hist: array<atomic<u32>, 1024>;
var<workgroup> qw: array<atomic<u32>, 768>;
var<workgroup> amax_bits: atomic<u32>;
// The select's state: (lo, hi, want, done); done 0 = go on, 1 = T = lo with `want` ties of T to
// keep by rank, 2 = keep every key ≥ lo.
var<workgroup> st: vec4<u32>;
var<private> yr: array<f32, 12>;

fn is_nan_bits(b: u32) -> bool {
    return (b & 0x7fffffffu) > 0x7f800000u;
}

fn val(base: u32, c: u32, r: f32) -> f32 {
    if (NORM == 1u) {
        return x[base + c] * r * weight[c];
    }
    return x[base + c];
}

fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v) & 0x7fffffffu;
    if (b > 0x7f800000u) {
        return 0u;
    }
    return b + 1u;
}

fn quant(v: f32, s: f32, lo: f32, hi: f32) -> i32 {
    let prod = v * s;
    if (is_nan_bits(bitcast<u32>(prod))) {
        return 0;
    }
    return i32(clamp(round(prod), lo, hi));
}

// Σ over the invocations' v (the reference's pairwise halves 128 … 1), returned to all; every
// invocation must call it.
fn tree_sum(lid: u32, v: f32) -> f32 {
    red[lid] = bitcast<u32>(v);
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h = h >> 1u) {
        if (lid < h) {
            red[lid] = bitcast<u32>(bitcast<f32>(red[lid]) + bitcast<f32>(red[lid + h]));
        }
        workgroupBarrier();
    }
    let total = bitcast<f32>(red[0]);
    workgroupBarrier();
    return total;
}

// Inclusive suffix sum over the invocations (Σ_{j ≥ lid} v_j), ping-pong between the halves of
// `red` (one barrier a step); every invocation must call it.
fn suffix_sum(lid: u32, v0: u32) -> u32 {
    var v = v0;
    red[lid] = v;
    workgroupBarrier();
    for (var k = 0u; k < 8u; k = k + 1u) {
        let off = 1u << k;
        let src = (k & 1u) * WG;
        if (lid + off < WG) {
            v = v + red[src + lid + off];
        }
        red[WG - src + lid] = v;
        workgroupBarrier();
    }
    return v;
}

// Add key kc to the histogram of range [lo, hi) (bins of 2^shift keys).
fn bin_add(kc: u32, lo: u32, hi: u32, shift: u32) {
    if (kc >= lo && kc < hi) {
        atomicAdd(&hist[(kc - lo) >> shift], 1u);
    }
}

// One select step after the histogram is complete: find the bin holding the want-th largest key of
// [lo, hi) and write the next state (one invocation writes it).
fn select_step(lid: u32, lo: u32, hi: u32, want: u32, shift: u32) {
    var h: array<u32, 4>;
    var tot = 0u;
    for (var e = 0u; e < 4u; e = e + 1u) {
        h[e] = atomicLoad(&hist[4u * lid + e]);
        tot = tot + h[e];
    }
    let incl = suffix_sum(lid, tot);
    var above = incl - tot; // keys of [lo, hi) in bins above this invocation's four
    if (above < want && incl >= want) {
        for (var e = 3i; e >= 0; e = e - 1) {
            let hb = h[e];
            if (above + hb >= want) {
                let b = 4u * lid + u32(e);
                let w = want - above;
                let blo = lo + (b << shift);
                let bhi = min(hi, blo + (1u << shift));
                var done = 0u;
                if (hb == w) {
                    done = 2u;
                } else if (bhi - blo == 1u) {
                    done = 1u;
                }
                st = vec4<u32>(blo, bhi, w, done);
                break;
            }
            above = above + hb;
        }
    }
    if (lid == 0u && incl < want) {
        // Fewer than `want` keys in [lo, hi): the threshold lies below lo.
        if (lo == 0u) {
            st = vec4<u32>(0u, 1u, 0u, 2u); // cannot happen (all keys are < hi); keep all
        } else {
            st = vec4<u32>(0u, lo, want - incl, 0u);
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let n = select(0u, p.n, in_range);
    let base = row * p.n;
    let fast = n <= R * WG;
    if (lid == 0u) {
        atomicStore(&amax_bits, 0u);
    }
    for (var j = 0u; j < QW / WG; j = j + 1u) {
        atomicStore(&qw[lid + WG * j], 0u);
    }
    // Load the row (and the norm weight) into registers, every load issued before any is used;
    // the norm's sum of squares in rmsnorm.wgsl's order.
    var ss = 0.0;
    var r = 1.0;
    if (fast) {
        var xr: array<f32, 12>;
        var wr: array<f32, 12>;
        for (var i = 0u; i < R; i = i + 1u) {
            let c = lid + WG * i;
            xr[i] = 0.0;
            wr[i] = 0.0;
            if (c < n) {
                xr[i] = x[base + c];
                if (NORM == 1u) {
                    wr[i] = weight[c];
                }
            }
        }
        if (NORM == 1u) {
            for (var i = 0u; i < R; i = i + 1u) {
                if (lid + WG * i < n) {
                    ss = ss + xr[i] * xr[i];
                }
            }
        }
        if (NORM == 1u) {
            r = 1.0 / sqrt(tree_sum(lid, ss) / f32(p.n) + p.eps);
        }
        for (var i = 0u; i < R; i = i + 1u) {
            if (NORM == 1u) {
                yr[i] = xr[i] * r * wr[i];
            } else {
                yr[i] = xr[i];
            }
        }
    }
    if (!fast && NORM == 1u) {
        for (var c = lid; c < n; c = c + WG) {
            let v = x[base + c];
            ss = ss + v * v;
        }
        r = 1.0 / sqrt(tree_sum(lid, ss) / f32(p.n) + p.eps);
    }
    let qbase = row * p.q_stride;

    // TopK 50% + INT8: amax, then the select.
    let k = n / 2u;
    var m = 0u;
    if (fast) {
        for (var i = 0u; i < R; i = i + 1u) {
            if (lid + WG * i < n) {
                let b = bitcast<u32>(yr[i]) & 0x7fffffffu;
                if (b <= 0x7f800000u) {
                    m = max(m, b);
                }
            }
        }
    } else {
        for (var c = lid; c < n; c = c + WG) {
            let b = bitcast<u32>(val(base, c, r)) & 0x7fffffffu;
            if (b <= 0x7f800000u) {
                m = max(m, b);
            }
        }
    }
    atomicMax(&amax_bits, m);
    workgroupBarrier();
    if (lid == 0u) {
        if (k == 0u) {
            st = vec4<u32>(0xffffffffu, 0u, 0u, 2u); // nothing is kept
        } else {
            let hi0 = atomicLoad(&amax_bits) + 2u; // one past the largest key (bits + 1)
            st = vec4<u32>(hi0 - min(hi0, WIN), hi0, k, 0u);
        }
    }
    for (var ps = 0u; ps < PASSES; ps = ps + 1u) {
        let s4 = workgroupUniformLoad(&st);
        if (s4.w != 0u) {
            break;
        }
        let lo = s4.x;
        let hi = s4.y;
        let bits = 32u - countLeadingZeros(hi - lo - 1u);
        let shift = select(0u, bits - 10u, bits > 10u);
        for (var e = 0u; e < 4u; e = e + 1u) {
            atomicStore(&hist[4u * lid + e], 0u);
        }
        workgroupBarrier();
        if (fast) {
            for (var i = 0u; i < R; i = i + 1u) {
                if (lid + WG * i < n) {
                    bin_add(key(yr[i]), lo, hi, shift);
                }
            }
        } else {
            for (var c = lid; c < n; c = c + WG) {
                bin_add(key(val(base, c, r)), lo, hi, shift);
            }
        }
        workgroupBarrier();
        select_step(lid, lo, hi, s4.z, shift);
    }
    let fin = workgroupUniformLoad(&st);
    let t = fin.x;
    let rk = fin.z;
    let all_t = fin.w != 1u;
    let amax = select(0.0, bitcast<f32>(atomicLoad(&amax_bits)), k > 0u);
    let s = div_rn(127.0, max(amax, 1e-5));

    if (fast && all_t) {
        // Keep every key ≥ T: no ranks. Columns' bytes into the staged words, then one write each.
        for (var i = 0u; i < R; i = i + 1u) {
            let c = lid + WG * i;
            if (c < n && key(yr[i]) >= t) {
                let v = quant(yr[i], s, -128.0, 127.0);
                if (v != 0) {
                    atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
                }
            }
        }
        workgroupBarrier();
        if (in_range) {
            if (lid == 0u) {
                s_out[row] = s;
            }
            for (var w = lid; w < p.q_stride; w = w + WG) {
                var packed = 0u;
                if (w < QW) {
                    packed = atomicLoad(&qw[w]);
                }
                q[qbase + w] = packed;
            }
        }
        return;
    }

    // Ranks of the ties (or a long row): invocation lid owns words [w0, w1) (columns 4·w0 ..
    // 4·w1); count its ties, then an exclusive scan gives the number of ties before its run.
    let per = (p.q_stride + WG - 1u) / WG;
    let w0 = min(lid * per, p.q_stride);
    let w1 = min(w0 + per, p.q_stride);
    var before = 0u;
    if (!all_t) {
        var ties = 0u;
        for (var c = 4u * w0; c < min(4u * w1, n); c = c + 1u) {
            if (key(val(base, c, r)) == t) {
                ties = ties + 1u;
            }
        }
        // Exclusive prefix = total − inclusive suffix of this invocation (after its eight steps
        // the scan's result is in the first half of `red`: red[0] is the total).
        let incl = suffix_sum(lid, ties);
        before = red[0] - incl;
    }
    if (in_range) {
        if (lid == 0u) {
            s_out[row] = s;
        }
        for (var w = w0; w < w1; w = w + 1u) {
            var packed = 0u;
            for (var j = 0u; j < 4u; j = j + 1u) {
                let c = 4u * w + j;
                var v = 0i;
                if (c < n) {
                    let y = val(base, c, r);
                    let kc = key(y);
                    var kept = kc > t;
                    if (kc == t) {
                        kept = all_t || before < rk;
                        before = before + 1u;
                    }
                    if (kept) {
                        v = quant(y, s, -128.0, 127.0);
                    }
                }
                packed = packed | ((bitcast<u32>(v) & 0xffu) << (8u * j));
            }
            q[qbase + w] = packed;
        }
    }
}
