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
// The threshold: a radix select over key ranges, 1024 bins per pass (the code: topk_select.wgsl,
//   imported here and by ternary_gemv_dec_norm.wgsl's TopK prologue). Pass 0 bins the 2^26 keys
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
// Latency (decode: one row, one workgroup; branch h-a48q). Rows of n ≤ 3072 values: every
// invocation issues its (up to) 12 loads of x and of the norm weight at once, into scalars (the
// NVIDIA driver keeps private arrays in memory: h-cat's measurement), so the row costs one memory
// round trip; y stays in those registers (invocation l: columns l, l + 256, …, the reference's
// lane order for the sums; out-of-range strips add +0.0, which changes no sum). The tree sum
// (norm) and tree max (amax) take two barriers each instead of eight (32 invocations reduce
// 8-leaf subtrees — the halves 128, 64, 32 — then every invocation the 32 partials: the same
// additions in the same order). A select pass takes four barriers instead of twelve: the bins'
// suffix counts by a two-level scan (16 groups of 16 invocations, every load independent) instead
// of an 8-step ping-pong, and the histogram for the next pass is cleared inside the pass. The
// kept codes are assembled in workgroup memory (atomicOr of each column's byte) and each word
// written once. Longer rows re-read x (and the norm weight) in every pass.
//
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32 (NORM = 1);
// q [n_rows][q_stride] u32; s [n_rows] f32 multipliers (x ≈ q / s).

// #import common
// #import topk_select
// #import nan_bits
// #import act_round
// #import ordered_sum
// #import norm_quant_params
// #import norm_quant_row

override NORM: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
const R: u32 = 12u; // values per invocation held in registers (rows of n ≤ 3072)
const QW: u32 = 768u; // packed words staged in workgroup memory (3072 INT8 columns)
// Reductions and scans: 256 lane values (f32 as bits or counts), then 32 (or 16) partials.
var<workgroup> redm: array<u32, 256>;
var<workgroup> redm32: array<u32, 32>;
var<workgroup> hist: array<atomic<u32>, 1024>;
var<workgroup> qw: array<atomic<u32>, 768>;
// The select's state (topk_select.wgsl, the select shared with ternary_gemv_dec_norm.wgsl's TopK
// prologue and imported here).
var<workgroup> st: vec4<u32>;

// The select's histogram (topk_select.wgsl's interface).
fn hist_add(b: u32) {
    atomicAdd(&hist[b], 1u);
}

fn hist_load(b: u32) -> u32 {
    return atomicLoad(&hist[b]);
}

fn hist_clear(b: u32) {
    atomicStore(&hist[b], 0u);
}


// The select's re-read of a column (topk_select.wgsl's interface).
fn topk_y(base: u32, c: u32, r: f32) -> f32 {
    return val(base, c, r);
}

fn rf(i: u32) -> f32 {
    return bitcast<f32>(redm32[i]);
}

// Lane l (< 4) of redm32's 32 lane sums after the halves 16, 8 and 4.
fn f4(l: u32) -> f32 {
    return ad(
        ad(ad(rf(l), rf(l + 16u)), ad(rf(l + 8u), rf(l + 24u))),
        ad(ad(rf(l + 4u), rf(l + 20u)), ad(rf(l + 12u), rf(l + 28u))),
    );
}

fn rr(i: u32) -> f32 {
    return bitcast<f32>(redm[i]);
}

// Σ over the invocations' v in the order of the halves 128 … 1 (lane i += lane i + h), returned
// to every invocation; two barriers. Every invocation must call it. `redm` / `redm32` may be
// rewritten right after (each later first write follows a barrier that every read here precedes).
fn tree_sum(lid: u32, v: f32) -> f32 {
    redm[lid] = bitcast<u32>(v);
    workgroupBarrier();
    if (lid < 32u) {
        // lane lid after the halves 128, 64, 32
        let a0 = ad(rr(lid), rr(lid + 128u));
        let a1 = ad(rr(lid + 64u), rr(lid + 192u));
        let a2 = ad(rr(lid + 32u), rr(lid + 160u));
        let a3 = ad(rr(lid + 96u), rr(lid + 224u));
        redm32[lid] = bitcast<u32>(ad(ad(a0, a1), ad(a2, a3)));
    }
    workgroupBarrier();
    // the halves 16, 8, 4 (f4), 2, 1
    return ad(ad(f4(0u), f4(2u)), ad(f4(1u), f4(3u)));
}

// max over the invocations' v (exact in any order), returned to every invocation; two barriers.
fn tree_max(lid: u32, v: u32) -> u32 {
    redm[lid] = v;
    workgroupBarrier();
    if (lid < 32u) {
        let a0 = max(redm[lid], redm[lid + 32u]);
        let a1 = max(redm[lid + 64u], redm[lid + 96u]);
        let a2 = max(redm[lid + 128u], redm[lid + 160u]);
        let a3 = max(redm[lid + 192u], redm[lid + 224u]);
        redm32[lid] = max(max(a0, a1), max(a2, a3));
    }
    workgroupBarrier();
    var m = 0u;
    m = max(m, max(max(redm32[0u], redm32[1u]), max(redm32[2u], redm32[3u])));
    m = max(m, max(max(redm32[4u], redm32[5u]), max(redm32[6u], redm32[7u])));
    m = max(m, max(max(redm32[8u], redm32[9u]), max(redm32[10u], redm32[11u])));
    m = max(m, max(max(redm32[12u], redm32[13u]), max(redm32[14u], redm32[15u])));
    m = max(m, max(max(redm32[16u], redm32[17u]), max(redm32[18u], redm32[19u])));
    m = max(m, max(max(redm32[20u], redm32[21u]), max(redm32[22u], redm32[23u])));
    m = max(m, max(max(redm32[24u], redm32[25u]), max(redm32[26u], redm32[27u])));
    m = max(m, max(max(redm32[28u], redm32[29u]), max(redm32[30u], redm32[31u])));
    return m;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    zb = p.n >> 31u;
    let row = wg.x;
    let in_range = row < p.n_rows;
    let n = select(0u, p.n, in_range);
    let base = row * p.n;
    let fast = p.n <= R * WG;
    for (var e = 0u; e < 4u; e = e + 1u) {
        atomicStore(&hist[4u * lid + e], 0u);
    }
    for (var j = 0u; j < QW / WG; j = j + 1u) {
        atomicStore(&qw[lid + WG * j], 0u);
    }
    // Rows of n ≤ 3072: every load of the row (and the norm weight) issued before any is used.
    // Past the row (or with a long row) the values are 0 and unused.
    let ld = fast && in_range;
    let x0 = ldx(base, lid + 0u * WG, select(0u, n, ld));
    let x1 = ldx(base, lid + 1u * WG, select(0u, n, ld));
    let x2 = ldx(base, lid + 2u * WG, select(0u, n, ld));
    let x3 = ldx(base, lid + 3u * WG, select(0u, n, ld));
    let x4 = ldx(base, lid + 4u * WG, select(0u, n, ld));
    let x5 = ldx(base, lid + 5u * WG, select(0u, n, ld));
    let x6 = ldx(base, lid + 6u * WG, select(0u, n, ld));
    let x7 = ldx(base, lid + 7u * WG, select(0u, n, ld));
    let x8 = ldx(base, lid + 8u * WG, select(0u, n, ld));
    let x9 = ldx(base, lid + 9u * WG, select(0u, n, ld));
    let x10 = ldx(base, lid + 10u * WG, select(0u, n, ld));
    let x11 = ldx(base, lid + 11u * WG, select(0u, n, ld));
    let w0 = ldw(lid + 0u * WG, select(0u, n, ld));
    let w1 = ldw(lid + 1u * WG, select(0u, n, ld));
    let w2 = ldw(lid + 2u * WG, select(0u, n, ld));
    let w3 = ldw(lid + 3u * WG, select(0u, n, ld));
    let w4 = ldw(lid + 4u * WG, select(0u, n, ld));
    let w5 = ldw(lid + 5u * WG, select(0u, n, ld));
    let w6 = ldw(lid + 6u * WG, select(0u, n, ld));
    let w7 = ldw(lid + 7u * WG, select(0u, n, ld));
    let w8 = ldw(lid + 8u * WG, select(0u, n, ld));
    let w9 = ldw(lid + 9u * WG, select(0u, n, ld));
    let w10 = ldw(lid + 10u * WG, select(0u, n, ld));
    let w11 = ldw(lid + 11u * WG, select(0u, n, ld));
    var r = 1.0;
    if (NORM == 1u) {
        // rmsnorm.wgsl's sum of squares (columns lid, lid + 256, … from 0.0)
        var ss = 0.0;
        if (fast) {
            ss = ad(ss, x0 * x0);
            ss = ad(ss, x1 * x1);
            ss = ad(ss, x2 * x2);
            ss = ad(ss, x3 * x3);
            ss = ad(ss, x4 * x4);
            ss = ad(ss, x5 * x5);
            ss = ad(ss, x6 * x6);
            ss = ad(ss, x7 * x7);
            ss = ad(ss, x8 * x8);
            ss = ad(ss, x9 * x9);
            ss = ad(ss, x10 * x10);
            ss = ad(ss, x11 * x11);
        } else {
            for (var c = lid; c < n; c = c + WG) {
                let v = x[base + c];
                ss = ss + v * v;
            }
        }
        r = 1.0 / sqrt(tree_sum(lid, ss) / f32(p.n) + p.eps);
    }
    let y0 = yof(x0, r, w0);
    let y1 = yof(x1, r, w1);
    let y2 = yof(x2, r, w2);
    let y3 = yof(x3, r, w3);
    let y4 = yof(x4, r, w4);
    let y5 = yof(x5, r, w5);
    let y6 = yof(x6, r, w6);
    let y7 = yof(x7, r, w7);
    let y8 = yof(x8, r, w8);
    let y9 = yof(x9, r, w9);
    let y10 = yof(x10, r, w10);
    let y11 = yof(x11, r, w11);
    let qbase = row * p.q_stride;

    // TopK 50% + INT8: amax, then the select.
    let k = n / 2u;
    var m = 0u;
    if (fast) {
        m = max(m, select(0u, abs_bits(y0), lid + 0u * WG < n));
        m = max(m, select(0u, abs_bits(y1), lid + 1u * WG < n));
        m = max(m, select(0u, abs_bits(y2), lid + 2u * WG < n));
        m = max(m, select(0u, abs_bits(y3), lid + 3u * WG < n));
        m = max(m, select(0u, abs_bits(y4), lid + 4u * WG < n));
        m = max(m, select(0u, abs_bits(y5), lid + 5u * WG < n));
        m = max(m, select(0u, abs_bits(y6), lid + 6u * WG < n));
        m = max(m, select(0u, abs_bits(y7), lid + 7u * WG < n));
        m = max(m, select(0u, abs_bits(y8), lid + 8u * WG < n));
        m = max(m, select(0u, abs_bits(y9), lid + 9u * WG < n));
        m = max(m, select(0u, abs_bits(y10), lid + 10u * WG < n));
        m = max(m, select(0u, abs_bits(y11), lid + 11u * WG < n));
    } else {
        for (var c = lid; c < n; c = c + WG) {
            m = max(m, abs_bits(val(base, c, r)));
        }
    }
    let amax_bits = tree_max(lid, m);
    let fin = topk_select(lid, n, base, r, fast, amax_bits, k, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11);
    let t = fin.x;
    let rk = fin.z;
    let all_t = fin.w != 1u;
    let amax = select(0.0, bitcast<f32>(amax_bits), k > 0u);
    let s = div_rn(127.0, max(amax, 1e-5));

    if (fast && all_t) {
        // Keep every key ≥ T: no ranks. Columns' bytes into the staged words, then one write each.
        if (lid + 0u * WG < n && key(y0) >= t) {
            let v = quant(y0, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 0u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 1u * WG < n && key(y1) >= t) {
            let v = quant(y1, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 1u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 2u * WG < n && key(y2) >= t) {
            let v = quant(y2, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 2u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 3u * WG < n && key(y3) >= t) {
            let v = quant(y3, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 3u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 4u * WG < n && key(y4) >= t) {
            let v = quant(y4, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 4u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 5u * WG < n && key(y5) >= t) {
            let v = quant(y5, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 5u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 6u * WG < n && key(y6) >= t) {
            let v = quant(y6, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 6u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 7u * WG < n && key(y7) >= t) {
            let v = quant(y7, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 7u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 8u * WG < n && key(y8) >= t) {
            let v = quant(y8, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 8u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 9u * WG < n && key(y9) >= t) {
            let v = quant(y9, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 9u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 10u * WG < n && key(y10) >= t) {
            let v = quant(y10, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 10u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
            }
        }
        if (lid + 11u * WG < n && key(y11) >= t) {
            let v = quant(y11, s, -128.0, 127.0);
            if (v != 0) {
                let c = lid + 11u * WG;
                atomicOr(&qw[c >> 2u], (bitcast<u32>(v) & 0xffu) << (8u * (c & 3u)));
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

    // Ranks of the ties (or a long row): invocation lid owns words [wa, wb) (columns 4·wa ..
    // 4·wb); count its ties, then a scan gives the number of ties before its run.
    let per = (p.q_stride + WG - 1u) / WG;
    let wa = min(lid * per, p.q_stride);
    let wb = min(wa + per, p.q_stride);
    var before = 0u;
    if (!all_t) {
        before = topk_ties_before(lid, n, base, r, t, wa, wb);
    }
    if (in_range) {
        if (lid == 0u) {
            s_out[row] = s;
        }
        for (var w = wa; w < wb; w = w + 1u) {
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
