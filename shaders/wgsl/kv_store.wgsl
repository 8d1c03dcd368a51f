// KV-cache store in every format of tern_format::kv (the spec: math, packing, byte accounting).
// The batch's rows src[t] (t < n_tokens, keys after RoPE) go to positions p0 + t, p0 from the
// step buffer the host rewrites before each submit (one recorded plan serves every position);
// positions past n_ctx are skipped (the host checks first).
//
// One layer's keys (or values) are one array<u32> `cache` (one binding), in sections:
//   codes  [0, par): position p's row of codes at code_base(p), `wpr` words (a3: position 0 has
//          its own 4-bit row of `wpr0` words first); f32: the raw bits, f16: pairs of halves.
//   params [par, win): absmax: the f16 scale of every (position, kv head), two per word
//          (entry p·heads + h); KIVI keys: (scale, min) f16 pairs per (group of G positions,
//          channel) at par + (p / G)·row + c; KIVI values: per (position, group of G channels)
//          at par + p·ngroups + c / G (scale in the low half, min in the high half).
//   window [win, ..): KIVI only, the f16 full-precision window, a ring of min(R, n_ctx) rows
//          (position p at row p % R): keys and values at positions ≥ Q(n) = R·⌊n/R⌋.
//
// STAGE 0 (f32, f16, q8, a4, a3): invocation (t, w) writes word w of position p0 + t's codes,
//   computing the scale of each kv head it touches (absmax over the head's head_dim values);
//   invocations past n_tokens · max(wpr, wpr0) write the scale words the batch touches (read-
//   modify-write of the halves outside the batch: a word may be shared with another position).
// KIVI quantizes keys and values a block of R positions at a time, when the block fills: the
// blocks of positions [Q(p0), Q(n)) (n = p0 + n_tokens).
// STAGE 1 (KIVI keys): invocation (group, w) computes the channels of word w over the group's G
//   positions (min/max, f16 scale and min), writes their params and the group's G code words w.
// STAGE 2 (KIVI values): invocation (position, w) computes word w (each channel's group's
//   min/max over its G channels; the invocation holding a group's first channel writes its
//   params).
// STAGE 3 (KIVI window): new positions ≥ Q(n) go to their ring row as f16.
// STAGE 4 / 5 (KIVI keys / values, one-token batches): stage 1 / 2, then stage 3 in the same
//   dispatch (a block that fills holds the token, which then has no window row).
// Stages 1 and 2 read positions < p0 from the ring and the others from src rounded to f16 (the
// window's own precision), so a value is quantized from the same f16 whether or not it passed
// through the ring; they run before stage 3 overwrites ring rows.
// Division is correctly rounded (div_rn) and f16 rounding is to nearest even, saturated to
// ±65504 (f16_sat): the codes are the CPU oracle's (tern_reference::kv_codec), bit for bit.
// Bindings: geometry; step; src [n_tokens][row] f32; cache (one layer's keys or values).

struct Step {
    p0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> g: Geom;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache: array<u32>;

// 0 f32, 1 f16, 2 q8, 3 q4 (KIVI), 4 q3, 5 q2, 6 a4, 7 a3 (tern_format::KvQuant::ALL order).
override FMT: u32 = 0u;
override STAGE: u32 = 0u;

fn fmt_bits() -> u32 {
    switch FMT {
        case 0u: { return 32u; }
        case 1u: { return 16u; }
        case 2u: { return 8u; }
        case 3u, 6u: { return 4u; }
        case 4u, 7u: { return 3u; }
        default: { return 2u; }
    }
}

// Bits of position p's codes (a3 keeps position 0 at 4 bits).
fn pos_bits(p: u32) -> u32 {
    return select(fmt_bits(), 4u, FMT == 7u && p == 0u);
}

fn per_word(bits: u32) -> u32 {
    return select(32u / bits, 10u, bits == 3u);
}

fn code_base(p: u32) -> u32 {
    if (FMT == 7u && p > 0u) {
        return g.wpr0 + (p - 1u) * g.wpr;
    }
    return p * g.wpr;
}

// round half away from zero
fn round_away(y: f32) -> f32 {
    return sign(y) * floor(abs(y) + 0.5);
}

fn h2f(h: u32) -> f32 {
    return f16_bits_to_f32(h & 0xffffu);
}

// f16 bits of x, saturated to ±65504 (the spec's f16 of a stored value, scale or zero point)
fn f16_sat(x: f32) -> u32 {
    return f32_to_f16_bits(clamp(x, -65504.0, 65504.0));
}

fn to_f16(x: f32) -> f32 {
    return h2f(f16_sat(x));
}

// KIVI: positions quantized (keys and values) when n are held.
fn kivi_q(n: u32) -> u32 {
    return g.resid * (n / g.resid);
}

// Channel c of position p as stage 1/2 quantize it: the ring's f16 below p0, else the batch's
// row rounded to f16.
fn kivi_src(p: u32, c: u32) -> f32 {
    if (p >= step.p0) {
        return to_f16(src[(p - step.p0) * g.row + c]);
    }
    let e = (p % g.resid) * g.row + c;
    let win = select(g.v_win, g.k_win, g.is_key != 0u);
    let w = cache[win + (e >> 1u)];
    return h2f(w >> ((e & 1u) * 16u));
}

// f16 (scale, min) of KIVI values over [lo, hi) (bits of the scale low, min high).
fn minmax_pack(mn: f32, mx: f32, levels: f32) -> u32 {
    let s = f16_sat(div_rn(mx - mn, levels));
    let m = f16_sat(mn);
    return s | (m << 16u);
}

fn kivi_code(x: f32, sm: u32, qmax: u32) -> u32 {
    let s = h2f(sm);
    if (s == 0.0) {
        return 0u;
    }
    let y = round_away(div_rn(x - h2f(sm >> 16u), s));
    return u32(clamp(y, 0.0, f32(qmax)));
}

// absmax of head h of batch row t
fn head_amax(t: u32, h: u32) -> f32 {
    var a = 0.0;
    let b = t * g.row + h * g.head_dim;
    for (var i = 0u; i < g.head_dim; i = i + 1u) {
        a = max(a, abs(src[b + i]));
    }
    return a;
}

fn absmax_qmax(bits: u32) -> u32 {
    return (1u << (bits - 1u)) - 1u;
}

// f16 scale of head h of batch row t at `bits` (as f32)
fn head_scale(t: u32, h: u32, bits: u32) -> f32 {
    return to_f16(div_rn(head_amax(t, h), f32(absmax_qmax(bits))));
}

fn stage_rows(idx: u32) {
    let wmax = max(g.wpr, g.wpr0);
    let n_code = g.n_tokens * wmax;
    if (idx < n_code) {
        let t = idx / wmax;
        let w = idx % wmax;
        let p = step.p0 + t;
        if (p >= g.n_ctx) {
            return;
        }
        let base = t * g.row;
        if (FMT == 0u) {
            if (w < g.row) {
                cache[p * g.row + w] = bitcast<u32>(src[base + w]);
            }
            return;
        }
        if (FMT == 1u) {
            if (w < g.wpr) {
                let lo = f16_sat(src[base + 2u * w]);
                let hi = f16_sat(src[base + 2u * w + 1u]);
                cache[p * g.wpr + w] = lo | (hi << 16u);
            }
            return;
        }
        let bits = pos_bits(p);
        let cpw = per_word(bits);
        let words = select(g.wpr, g.wpr0, FMT == 7u && p == 0u);
        if (w >= words) {
            return;
        }
        let qmax = absmax_qmax(bits);
        let mask = (1u << bits) - 1u;
        var word = 0u;
        var cur = 0xffffffffu;
        var s = 0.0;
        let c_end = min((w + 1u) * cpw, g.row);
        for (var c = w * cpw; c < c_end; c = c + 1u) {
            let h = c / g.head_dim;
            if (h != cur) {
                cur = h;
                s = head_scale(t, h, bits);
            }
            var q = 0;
            if (s != 0.0) {
                let y = round_away(div_rn(src[base + c], s));
                q = i32(clamp(y, -f32(qmax), f32(qmax)));
            }
            // q8: the i8 byte; a4/a3: q + qmax, unsigned
            let code = select(u32(q + i32(qmax)), u32(q) & 0xffu, FMT == 2u);
            word = word | ((code & mask) << ((c - w * cpw) * bits));
        }
        cache[code_base(p) + w] = word;
        return;
    }
    if (FMT < 2u) {
        return;
    }
    // scale words: entries e = p·heads + h, two per word
    let e0 = step.p0 * g.heads;
    let e1 = min(step.p0 + g.n_tokens, g.n_ctx) * g.heads;
    let sw = e0 / 2u + (idx - n_code);
    if (2u * sw >= e1 || e0 >= e1) {
        return;
    }
    var word = cache[g.par + sw];
    for (var k = 0u; k < 2u; k = k + 1u) {
        let e = 2u * sw + k;
        if (e >= e0 && e < e1) {
            let p = e / g.heads;
            let h = e % g.heads;
            let bits = pos_bits(p);
            let sb = f16_sat(div_rn(head_amax(p - step.p0, h), f32(absmax_qmax(bits))));
            word = (word & ~(0xffffu << (16u * k))) | (sb << (16u * k));
        }
    }
    cache[g.par + sw] = word;
}

fn stage_kivi_keys(idx: u32) {
    let bits = fmt_bits();
    let cpw = per_word(bits);
    let qmax = (1u << bits) - 1u;
    let gi = idx / g.wpr;
    let w = idx % g.wpr;
    let n = min(step.p0 + g.n_tokens, g.n_ctx);
    let first = kivi_q(step.p0) / g.group + gi;
    let p_begin = first * g.group;
    if (p_begin + g.group > kivi_q(n)) {
        return;
    }
    let c_begin = w * cpw;
    let c_end = min(c_begin + cpw, g.row);
    // params of each channel (at most 16 per word)
    var sm: array<u32, 16>;
    for (var c = c_begin; c < c_end; c = c + 1u) {
        var mn = 3.0e38;
        var mx = -3.0e38;
        for (var p = p_begin; p < p_begin + g.group; p = p + 1u) {
            let x = kivi_src(p, c);
            mn = min(mn, x);
            mx = max(mx, x);
        }
        let v = minmax_pack(mn, mx, f32(qmax));
        sm[c - c_begin] = v;
        cache[g.par + first * g.row + c] = v;
    }
    for (var p = p_begin; p < p_begin + g.group; p = p + 1u) {
        var word = 0u;
        for (var c = c_begin; c < c_end; c = c + 1u) {
            let q = kivi_code(kivi_src(p, c), sm[c - c_begin], qmax);
            word = word | (q << ((c - c_begin) * bits));
        }
        cache[code_base(p) + w] = word;
    }
}

fn stage_kivi_values(idx: u32) {
    let bits = fmt_bits();
    let cpw = per_word(bits);
    let qmax = (1u << bits) - 1u;
    let p = kivi_q(step.p0) + idx / g.wpr;
    let w = idx % g.wpr;
    let n = min(step.p0 + g.n_tokens, g.n_ctx);
    if (p >= kivi_q(n)) {
        return;
    }
    let c_begin = w * cpw;
    let c_end = min(c_begin + cpw, g.row);
    var word = 0u;
    var cur = 0xffffffffu;
    var sm = 0u;
    for (var c = c_begin; c < c_end; c = c + 1u) {
        let gc = c / g.group;
        if (gc != cur) {
            cur = gc;
            var mn = 3.0e38;
            var mx = -3.0e38;
            let lo = gc * g.group;
            let hi = min(lo + g.group, g.row);
            for (var i = lo; i < hi; i = i + 1u) {
                let x = kivi_src(p, i);
                mn = min(mn, x);
                mx = max(mx, x);
            }
            sm = minmax_pack(mn, mx, f32(qmax));
            if (lo >= c_begin) {
                cache[g.par + p * g.ngroups + gc] = sm;
            }
        }
        let q = kivi_code(kivi_src(p, c), sm, qmax);
        word = word | (q << ((c - c_begin) * bits));
    }
    cache[code_base(p) + w] = word;
}

fn stage_window(idx: u32) {
    let half_row = g.row / 2u;
    let t = idx / half_row;
    let w = idx % half_row;
    let p = step.p0 + t;
    let n = min(step.p0 + g.n_tokens, g.n_ctx);
    if (t >= g.n_tokens || p >= n) {
        return;
    }
    if (p < kivi_q(n)) {
        return;
    }
    let win = select(g.v_win, g.k_win, g.is_key != 0u);
    let b = t * g.row + 2u * w;
    let lo = f16_sat(src[b]);
    let hi = f16_sat(src[b + 1u]);
    cache[win + (p % g.resid) * half_row + w] = lo | (hi << 16u);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;
    switch STAGE {
        case 0u: { stage_rows(idx); }
        case 1u: { stage_kivi_keys(idx); }
        case 2u: { stage_kivi_values(idx); }
        case 4u, 5u: {
            // a one-token batch: the blocks that fill (kv.rs's rows · wpr invocations), then
            // the window row (row / 2) — disjoint: a block that fills holds the token
            let r = g.n_tokens + g.resid;
            let nq = select(r, (r + g.group - 1u) / g.group, STAGE == 4u) * g.wpr;
            if (idx < nq) {
                if (STAGE == 4u) {
                    stage_kivi_keys(idx);
                } else {
                    stage_kivi_values(idx);
                }
            } else {
                stage_window(idx - nq);
            }
        }
        default: { stage_window(idx); }
    }
}
