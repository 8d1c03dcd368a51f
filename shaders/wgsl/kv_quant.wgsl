// The KV-cache quantizing store shared by kv_store.wgsl and rope_kv.wgsl (issue 14): every
// format of tern_format::kv, written as kv_store.wgsl documents (sections, stages, rounding).
// The kernel that includes it (`// #import kv_quant`) defines the bindings `g`
// (Geom) and `step` (Step), the overrides FMT (kv_store.wgsl's numbering), and the accessors:
//   src_at(t, c)      value c of batch row t (keys after RoPE) as f32;
//   cache_ld(i), cache_st(i, w)   word i of the cache being written (keys or values);
//   is_key()          whether that cache holds keys.
// So the fused RoPE + store writes the separate kernels' bits by running the same code.

// #import f16_sat
// #import kv_formats

fn fmt_bits() -> u32 {
    switch FMT {
        case FMT_F32: { return 32u; }
        case FMT_F16: { return 16u; }
        case FMT_Q8: { return 8u; }
        case FMT_Q4, FMT_A4: { return 4u; }
        case FMT_Q3, FMT_A3: { return 3u; }
        default: { return 2u; }
    }
}

// Bits of position p's codes (a3 keeps position 0 at 4 bits).
fn pos_bits(p: u32) -> u32 {
    return select(fmt_bits(), 4u, FMT == FMT_A3 && p == 0u);
}

fn per_word(bits: u32) -> u32 {
    return select(32u / bits, 10u, bits == 3u);
}

fn code_base(p: u32) -> u32 {
    if (FMT == FMT_A3 && p > 0u) {
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
        return to_f16(src_at(p - step.p0, c));
    }
    let e = (p % g.resid) * g.row + c;
    let win = select(g.v_win, g.k_win, is_key());
    let w = cache_ld(win + (e >> 1u));
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

// absmax of head h of batch row t: 8 values loaded before they are used (an invocation walks
// the whole head, and a loop bound the driver cannot see is not pipelined: 22 µs per q8 store of
// a 2B4T layer with one load per iteration, docs/measurements.md). max is exact, so the order
// does not change the bits.
fn head_amax(t: u32, h: u32) -> f32 {
    var a = 0.0;
    let b = h * g.head_dim;
    var i = 0u;
    for (; i + 8u <= g.head_dim; i = i + 8u) {
        let x0 = abs(src_at(t, b + i));
        let x1 = abs(src_at(t, b + i + 1u));
        let x2 = abs(src_at(t, b + i + 2u));
        let x3 = abs(src_at(t, b + i + 3u));
        let x4 = abs(src_at(t, b + i + 4u));
        let x5 = abs(src_at(t, b + i + 5u));
        let x6 = abs(src_at(t, b + i + 6u));
        let x7 = abs(src_at(t, b + i + 7u));
        a = max(a, max(max(max(x0, x1), max(x2, x3)), max(max(x4, x5), max(x6, x7))));
    }
    for (; i < g.head_dim; i = i + 1u) {
        a = max(a, abs(src_at(t, b + i)));
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
        if (FMT == FMT_F32) {
            if (w < g.row) {
                cache_st(p * g.row + w, bitcast<u32>(src_at(t, w)));
            }
            return;
        }
        if (FMT == FMT_F16) {
            if (w < g.wpr) {
                let lo = f16_sat(src_at(t, 2u * w));
                let hi = f16_sat(src_at(t, 2u * w + 1u));
                cache_st(p * g.wpr + w, lo | (hi << 16u));
            }
            return;
        }
        let bits = pos_bits(p);
        let cpw = per_word(bits);
        let words = select(g.wpr, g.wpr0, FMT == FMT_A3 && p == 0u);
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
                let y = round_away(div_rn(src_at(t, c), s));
                q = i32(clamp(y, -f32(qmax), f32(qmax)));
            }
            // q8: the i8 byte; a4/a3: q + qmax, unsigned
            let code = select(u32(q + i32(qmax)), u32(q) & 0xffu, FMT == FMT_Q8);
            word = word | ((code & mask) << ((c - w * cpw) * bits));
        }
        cache_st(code_base(p) + w, word);
        return;
    }
    if (FMT < FMT_Q8) {
        return;
    }
    // scale words: entries e = p·heads + h, two per word
    let e0 = step.p0 * g.heads;
    let e1 = min(step.p0 + g.n_tokens, g.n_ctx) * g.heads;
    let sw = e0 / 2u + (idx - n_code);
    if (2u * sw >= e1 || e0 >= e1) {
        return;
    }
    var word = cache_ld(g.par + sw);
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
    cache_st(g.par + sw, word);
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
        cache_st(g.par + first * g.row + c, v);
    }
    for (var p = p_begin; p < p_begin + g.group; p = p + 1u) {
        var word = 0u;
        for (var c = c_begin; c < c_end; c = c + 1u) {
            let q = kivi_code(kivi_src(p, c), sm[c - c_begin], qmax);
            word = word | (q << ((c - c_begin) * bits));
        }
        cache_st(code_base(p) + w, word);
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
                cache_st(g.par + p * g.ngroups + gc, sm);
            }
        }
        let q = kivi_code(kivi_src(p, c), sm, qmax);
        word = word | (q << ((c - c_begin) * bits));
    }
    cache_st(code_base(p) + w, word);
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
    let win = select(g.v_win, g.k_win, is_key());
    let lo = f16_sat(src_at(t, 2u * w));
    let hi = f16_sat(src_at(t, 2u * w + 1u));
    cache_st(win + (p % g.resid) * half_row + w, lo | (hi << 16u));
}

// A one-token KIVI batch (STAGE 4 / 5 of kv_store.wgsl, and rope_kv.wgsl's KIVI stores): the
// blocks that fill (kv.rs's rows · wpr invocations), then the window row (row / 2) — disjoint:
// a block that fills holds the token. Keys (`keys`) or values.
fn kivi_step_count(keys: bool) -> u32 {
    let r = g.n_tokens + g.resid;
    return select(r, (r + g.group - 1u) / g.group, keys) * g.wpr;
}

fn stage_kivi_step(idx: u32, keys: bool) {
    let nq = kivi_step_count(keys);
    if (idx < nq) {
        if (keys) {
            stage_kivi_keys(idx);
        } else {
            stage_kivi_values(idx);
        }
    } else {
        stage_window(idx - nq);
    }
}

// Invocations of stage 0 for the batch (kv.rs's count): code words, then the scale words.
fn stage_rows_count() -> u32 {
    let codes = g.n_tokens * max(g.wpr, g.wpr0);
    if (FMT < FMT_Q8) {
        return codes;
    }
    return codes + (g.n_tokens * g.heads + 1u) / 2u + 1u;
}

// Invocations storing one cache (keys or values) of the batch: stage 0, or a one-token KIVI step.
fn store_count(keys: bool) -> u32 {
    if (FMT >= FMT_Q4 && FMT <= FMT_Q2) {
        return kivi_step_count(keys) + g.row / 2u;
    }
    return stage_rows_count();
}

// Invocation idx of store_count(keys)'s range.
fn store_at(idx: u32, keys: bool) {
    if (FMT >= FMT_Q4 && FMT <= FMT_Q2) {
        stage_kivi_step(idx, keys);
    } else {
        stage_rows(idx);
    }
}
