// BitNet a4.8 per-token activation quantizers, bit-exact with tern_reference::quant, optionally
// fused with the preceding RMSNorm (NORM = 1: y_c = x_c · r · weight_c, the arithmetic of
// rmsnorm.wgsl / rmsnorm_quant.wgsl, the f32 row not written; NORM = 0: y = x, `weight` unused).
//
// MODE 0, INT4 absmean (quantize_act_int4): β = Σ|y| / n with the sum in the reference's
//   `lane_tree_sum` order (lane l adds l, l + 256, … from 0.0; then pairwise, halves 128 … 1),
//   s = div_rn(√7, max(β, 1e-5)), q_c = clamp(round_half_even(y_c · s), −8, 7), NaN → 0.
//   Packed 8 per u32: word w holds columns 8w .. 8w + 8, column 8w + j (j < 4) in bits 8j .. 8j + 4
//   and column 8w + 4 + j in bits 8j + 4 .. 8j + 8 (so `w & 0x0f0f0f0f` and `(w >> 4) & 0x0f0f0f0f`
//   are the two halves as 4-bit two's-complement bytes); zero past n.
// MODE 1, TopK 50% + INT8 absmax (topk50_int8): k = ⌊n/2⌋ entries kept by the reference's tie
//   rule: key(v) = bits(|v|) + 1 (NaN: 0); T = the k-th largest key, found by a radix select over
//   the key's four bytes (256-bin histogram per pass, a parallel suffix sum picks the bin);
//   r = how many entries with key == T are still to keep; keep key > T, and key == T for the
//   first r in index order (each invocation owns a contiguous run of columns, an exclusive scan
//   of their tie counts gives each run its rank). s = div_rn(127, max(amax, 1e-5)) with amax the
//   largest non-NaN |y| (always kept when k ≥ 1; 0 when k = 0); q_c = clamp(round(y_c · s), −128,
//   127) for kept entries, 0 otherwise. Packed 4 per u32 as act_quant_int8.wgsl.
//
// Rows of n ≤ YC values are read (and normed) once: y is kept in workgroup memory for the later
// passes (the TopK radix passes, its tie count and output; INT4's output), the same f32 values the
// re-reads would give. Longer rows re-read x (and the norm weight) in every pass.
//
// One workgroup per row. Bindings: x [n_rows][n] f32; weight [n] f32 (NORM = 1);
// q [n_rows][q_stride] u32; s [n_rows] f32 multipliers (x ≈ q / s).

struct Params {
    n: u32,
    n_rows: u32,
    eps: f32,
    q_stride: u32,
}

override MODE: u32 = 0u;
override NORM: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<u32>;
@group(0) @binding(4) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
const SQRT7_BITS: u32 = 0x402953fdu; // f32 nearest √7 (= 7f32.sqrt())
var<workgroup> partial: array<f32, 256>;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> scan: array<u32, 256>;
var<workgroup> amax_bits: atomic<u32>;
var<workgroup> prefix: u32;
var<workgroup> want: u32;
var<workgroup> qscale: f32;
const YC: u32 = 3072u; // the row in workgroup memory up to this many values (12 KiB)
var<workgroup> ybuf: array<f32, 3072>;

fn is_nan_bits(b: u32) -> bool {
    return (b & 0x7fffffffu) > 0x7f800000u;
}

fn val(base: u32, c: u32, r: f32) -> f32 {
    if (NORM == 1u) {
        return x[base + c] * r * weight[c];
    }
    return x[base + c];
}

// y_c: from workgroup memory when the row is cached there (`cached`), else recomputed.
fn yat(base: u32, c: u32, r: f32, cached: bool) -> f32 {
    if (cached) {
        return ybuf[c];
    }
    return val(base, c, r);
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

// partial[0] ← Σ partial (halves 128 … 1); every invocation must call it.
fn tree_sum(lid: u32) {
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            partial[lid] = partial[lid] + partial[lid + st];
        }
        workgroupBarrier();
    }
}

// scan[i] ← Σ_{j ≥ i} scan[j] (inclusive suffix sum); every invocation must call it.
fn suffix_sum(lid: u32) {
    workgroupBarrier();
    for (var st = 1u; st < WG; st = st << 1u) {
        var add = 0u;
        if (lid + st < WG) {
            add = scan[lid + st];
        }
        workgroupBarrier();
        scan[lid] = scan[lid] + add;
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.x;
    let in_range = row < p.n_rows;
    let n = select(0u, p.n, in_range);
    let base = row * p.n;
    if (lid == 0u) {
        atomicStore(&amax_bits, 0u);
    }
    // The norm's 1/rms (rmsnorm.wgsl's reduction).
    var r = 1.0;
    if (NORM == 1u) {
        var ss = 0.0;
        for (var c = lid; c < n; c = c + WG) {
            let v = x[base + c];
            ss = ss + v * v;
        }
        partial[lid] = ss;
        tree_sum(lid);
        r = 1.0 / sqrt(partial[0] / f32(p.n) + p.eps);
        workgroupBarrier();
    }

    let cached = n <= YC;
    if (MODE == 0u) {
        var sa = 0.0;
        for (var c = lid; c < n; c = c + WG) {
            let yv = val(base, c, r);
            if (cached) {
                ybuf[c] = yv;
            }
            sa = sa + abs(yv);
        }
        partial[lid] = sa;
        tree_sum(lid);
        let beta = div_rn(partial[0], f32(max(p.n, 1u)));
        let s = div_rn(bitcast<f32>(SQRT7_BITS), max(beta, 1e-5));
        if (in_range) {
            if (lid == 0u) {
                s_out[row] = s;
            }
            let qbase = row * p.q_stride;
            for (var w = lid; w < p.q_stride; w = w + WG) {
                var packed = 0u;
                for (var j = 0u; j < 8u; j = j + 1u) {
                    let c = 8u * w + j;
                    var v = 0i;
                    if (c < n) {
                        v = quant(yat(base, c, r, cached), s, -8.0, 7.0);
                    }
                    let sh = select(8u * (j - 4u) + 4u, 8u * j, j < 4u);
                    packed = packed | ((bitcast<u32>(v) & 0xfu) << sh);
                }
                q[qbase + w] = packed;
            }
        }
        return;
    }

    // MODE 1: TopK 50% + INT8.
    let k = n / 2u;
    var m = 0u;
    for (var c = lid; c < n; c = c + WG) {
        let yv = val(base, c, r);
        if (cached) {
            ybuf[c] = yv;
        }
        let b = bitcast<u32>(yv) & 0x7fffffffu;
        if (b <= 0x7f800000u) {
            m = max(m, b);
        }
    }
    atomicMax(&amax_bits, m);
    if (lid == 0u) {
        prefix = 0u;
        want = k;
    }
    // Radix select of the k-th largest key, most significant byte first.
    for (var ps = 0u; ps < 4u; ps = ps + 1u) {
        let sh = 24u - 8u * ps;
        atomicStore(&hist[lid], 0u);
        workgroupBarrier();
        let pre = prefix;
        let wnt = want;
        for (var c = lid; c < n; c = c + WG) {
            let kc = key(yat(base, c, r, cached));
            // Entries whose higher bytes equal the prefix chosen so far.
            let hi_ok = ps == 0u || (kc >> (sh + 8u)) == (pre >> (sh + 8u));
            if (hi_ok) {
                atomicAdd(&hist[(kc >> sh) & 0xffu], 1u);
            }
        }
        workgroupBarrier();
        let h = atomicLoad(&hist[lid]);
        scan[lid] = h;
        suffix_sum(lid);
        // Bin lid holds the wnt-th largest when the bins above hold fewer and it reaches it.
        let above = scan[lid] - h;
        if (wnt > 0u && above < wnt && scan[lid] >= wnt) {
            prefix = pre | (lid << sh);
            want = wnt - above;
        }
        if (wnt == 0u && lid == 0u) {
            prefix = 0xffffffffu; // k = 0: nothing is kept
        }
        workgroupBarrier();
    }
    let t = prefix;
    let rk = want;
    let amax = select(0.0, bitcast<f32>(atomicLoad(&amax_bits)), k > 0u);
    let s = div_rn(127.0, max(amax, 1e-5));

    // Ties: invocation lid owns words [w0, w1) (columns 4·w0 .. 4·w1); count its ties, then an
    // exclusive scan gives the number of ties before its run.
    let per = (p.q_stride + WG - 1u) / WG;
    let w0 = min(lid * per, p.q_stride);
    let w1 = min(w0 + per, p.q_stride);
    var ties = 0u;
    for (var c = 4u * w0; c < min(4u * w1, n); c = c + 1u) {
        if (key(yat(base, c, r, cached)) == t) {
            ties = ties + 1u;
        }
    }
    workgroupBarrier();
    scan[lid] = ties;
    suffix_sum(lid);
    // Exclusive prefix = total − inclusive suffix of this invocation.
    var before = scan[0] - scan[lid];
    if (in_range) {
        if (lid == 0u) {
            s_out[row] = s;
        }
        let qbase = row * p.q_stride;
        for (var w = w0; w < w1; w = w + 1u) {
            var packed = 0u;
            for (var j = 0u; j < 4u; j = j + 1u) {
                let c = 4u * w + j;
                var v = 0i;
                if (c < n) {
                    let y = yat(base, c, r, cached);
                    let kc = key(y);
                    var kept = kc > t;
                    if (kc == t) {
                        kept = before < rk;
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
