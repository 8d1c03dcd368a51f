// GPU sampling helpers around the top-k kernel (topk.wgsl), for one row of logits:
//
// PASS 0 (one workgroup): the repetition-penalty tokens. For each of the ctl's n_hist distinct
//   recent token ids: out[hist_off + i] = the raw logit (as bits; NaN for an id ≥ n), and the
//   logit is set to NaN in place, so the top-k and the log-sum-exp below skip it. The host
//   applies the penalty to those raw values itself (the same f32 operations as the CPU sampler:
//   a GPU division is not correctly rounded) and merges them with the candidates.
// PASS 1: workgroup g takes logits [g·per, (g+1)·per) and writes (max, Σ exp((x − max) / T)) of its
//   non-NaN values to out[out_off + 2g ..]: T = the ctl's temperature (1 when it is 0).
// PASS 2 (one workgroup): merges the n (max, sum) pairs of pass 1 from `src` into
//   out[out_off], out[out_off + 1]: the row's M = max and S = Σ exp((x − M) / T) over non-NaN x,
//   so log-sum-exp = M + T·ln S. (With one workgroup of logits pass 1 writes the result directly.)
// An all-NaN (or all −inf) range gives (−inf, 0).
// Bindings: params; ctl = [n_hist, temperature bits, 0, 0, ids...]; src (PASS 0, 1: the logits
// as u32 bits, read-write for PASS 0; PASS 2: pairs); out.

// #import common

override PASS: u32 = 0u;

struct Params {
    n: u32, // logits (PASS 0, 1) or pairs (PASS 2)
    per: u32, // logits per workgroup (PASS 1)
    out_off: u32, // word offset of the (max, sum) output
    hist_off: u32, // word offset of the raw penalized logits (PASS 0)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ctl: array<u32>;
@group(0) @binding(2) var<storage, read_write> src: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

const WG: u32 = 256u;
const NAN_BITS: u32 = 0x7fc00000u;
var<workgroup> red_m: array<f32, 256>;
var<workgroup> red_s: array<f32, 256>;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

fn inv_temp() -> f32 {
    let t = bitcast<f32>(ctl[1]);
    if (t > 0.0) {
        return 1.0 / t;
    }
    return 1.0;
}

// (m, s) ⊕ (m2, s2) with s relative to m.
fn combine(m: f32, s: f32, m2: f32, s2: f32, it: f32) -> vec2<f32> {
    if (s2 == 0.0) {
        return vec2<f32>(m, s);
    }
    if (s == 0.0) {
        return vec2<f32>(m2, s2);
    }
    let mm = max(m, m2);
    return vec2<f32>(mm, s * exp((m - mm) * it) + s2 * exp((m2 - mm) * it));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let it = inv_temp();
    if (PASS == 0u) {
        let n_hist = min(ctl[0], WG);
        if (lid < n_hist) {
            let id = ctl[4u + lid];
            var raw = NAN_BITS;
            if (id < p.n) {
                raw = src[id];
                src[id] = NAN_BITS;
            }
            out[p.hist_off + lid] = raw;
        }
        return;
    }
    var m = neg_inf();
    var s = 0.0;
    if (PASS == 1u) {
        let start = wg.x * p.per;
        let end = min(start + p.per, p.n);
        for (var i = start + lid; i < end; i = i + WG) {
            let v = bitcast<f32>(src[i]);
            // NaN (penalized or bad) and −inf contribute nothing.
            if (v == v && v > neg_inf()) {
                if (s == 0.0) {
                    m = v;
                    s = 1.0;
                } else if (v > m) {
                    s = s * exp((m - v) * it) + 1.0;
                    m = v;
                } else {
                    s = s + exp((v - m) * it);
                }
            }
        }
    } else {
        for (var i = lid; i < p.n; i = i + WG) {
            let r = combine(m, s, bitcast<f32>(src[2u * i]), bitcast<f32>(src[2u * i + 1u]), it);
            m = r.x;
            s = r.y;
        }
    }
    red_m[lid] = m;
    red_s[lid] = s;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            let r = combine(red_m[lid], red_s[lid], red_m[lid + st], red_s[lid + st], it);
            red_m[lid] = r.x;
            red_s[lid] = r.y;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var o = p.out_off;
        if (PASS == 1u) {
            o = o + 2u * wg.x;
        }
        out[o] = bitcast<u32>(red_m[0]);
        out[o + 1u] = bitcast<u32>(red_s[0]);
    }
}
