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
        case FMT_Q4, FMT_A4, FMT_Q4R: { return 4u; }
        case FMT_Q3, FMT_A3, FMT_Q3R: { return 3u; }
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

fn absmax_qmax(bits: u32) -> u32 {
    return (1u << (bits - 1u)) - 1u;
}

// The absmax formats' scales pass (kv_store.wgsl's STAGE 6, rope_kv.wgsl's PASS 1), run before
// stage 0: the scale words of the batch's entries e = p·heads + h (p0·heads ≤ e < e1), written
// exactly as stage 0 wrote them before (f16(max|x| / qmax), two per word, the other half of a
// word outside the batch kept), but each head's max|x| reduced by 32 invocations at once
// (workgroup atomics over the f32 bits: abs values are ≥ 0, where the bits order as the values)
// instead of one invocation walking the head for every code word. Stage 0's code words then read
// their scale from the cache (one load: the same f16, so the same codes). Workgroup `wid` of the
// pass takes the 8 entries from 2·⌊e0/2⌋ + 8·wid (word-aligned pairs); 32 lanes per entry.
var<workgroup> amx: array<atomic<u32>, 8>;

// Workgroups of the scales pass for one cache (the launchers compute the same).
fn scales_groups() -> u32 {
    return (g.n_tokens * g.heads + 1u + 7u) / 8u;
}

fn stage_scales(lid: u32, wid: u32) {
    let slot = lid / 32u;
    let lane = lid % 32u;
    let e0 = step.p0 * g.heads;
    let e1 = min(step.p0 + g.n_tokens, g.n_ctx) * g.heads;
    let e = 2u * (e0 / 2u) + 8u * wid + slot;
    if (lane == 0u) {
        atomicStore(&amx[slot], 0u);
    }
    workgroupBarrier();
    if (e >= e0 && e < e1) {
        let p = e / g.heads;
        let b = (e % g.heads) * g.head_dim;
        let t = p - step.p0;
        var a = 0.0;
        var c = lane;
        for (; c + 96u < g.head_dim; c = c + 128u) {
            let x0 = abs(src_at(t, b + c));
            let x1 = abs(src_at(t, b + c + 32u));
            let x2 = abs(src_at(t, b + c + 64u));
            let x3 = abs(src_at(t, b + c + 96u));
            a = max(a, max(max(x0, x1), max(x2, x3)));
        }
        for (; c < g.head_dim; c = c + 32u) {
            a = max(a, abs(src_at(t, b + c)));
        }
        atomicMax(&amx[slot], bitcast<u32>(a));
    }
    workgroupBarrier();
    if (lane == 0u && slot % 2u == 0u && e + 1u >= e0 && e < e1) {
        var word = cache_ld(g.par + e / 2u);
        for (var k = 0u; k < 2u; k = k + 1u) {
            let ek = e + k;
            if (ek >= e0 && ek < e1) {
                let amax = bitcast<f32>(atomicLoad(&amx[slot + k]));
                let sb = f16_sat(div_rn(amax, f32(absmax_qmax(pos_bits(ek / g.heads)))));
                word = (word & ~(0xffffu << (16u * k))) | (sb << (16u * k));
            }
        }
        cache_st(g.par + e / 2u, word);
    }
}

// round_away(div_rn(x, s)) — the integer nearest the correctly rounded quotient — with one
// multiply by inv ≈ 1/s where that quotient is not within 1e-4 of a rounding boundary k + 0.5,
// else by the exact division. Why it is exact: WGSL's 1/s is within 2.5 ulp and x·inv adds 0.5,
// so |y − x/s| ≤ 3 ulp · |y| ≤ 4.6e-5 for |y| ≤ 128 (an absmax code: |x| ≤ amax ≈ qmax·s), and a
// quotient more than 1e-4 from every boundary rounds to the same integer either way (beyond 128
// both clamp to qmax). Non-finite y fails the test and takes the exact path.
fn round_quot(x: f32, s: f32, inv: f32) -> f32 {
    let y = x * inv;
    let a = abs(y);
    if (a <= 128.0 && abs(a - floor(a) - 0.5) > 1.0e-4) {
        return round_away(y);
    }
    return round_away(div_rn(x, s));
}

// f16 scale of entry (position p, head h) as the scales pass stored it (as f32)
fn stored_scale(p: u32, h: u32) -> f32 {
    let e = p * g.heads + h;
    return h2f(cache_ld(g.par + e / 2u) >> ((e & 1u) * 16u));
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
        var inv = 0.0;
        let c_end = min((w + 1u) * cpw, g.row);
        for (var c = w * cpw; c < c_end; c = c + 1u) {
            let h = c / g.head_dim;
            if (h != cur) {
                cur = h;
                s = stored_scale(p, h);
                inv = 1.0 / s;
            }
            var q = 0;
            if (s != 0.0) {
                let y = round_quot(src_at(t, c), s, inv);
                q = i32(clamp(y, -f32(qmax), f32(qmax)));
            }
            // q8: the i8 byte; a4/a3: q + qmax, unsigned
            let code = select(u32(q + i32(qmax)), u32(q) & 0xffu, FMT == FMT_Q8);
            word = word | ((code & mask) << ((c - w * cpw) * bits));
        }
        cache_st(code_base(p) + w, word);
    }
    // (the absmax scale words: written by the scales pass, stage_scales, before this stage)
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

// Invocations of stage 0 for the batch (kv.rs's count): the code words.
fn stage_rows_count() -> u32 {
    return g.n_tokens * max(g.wpr, g.wpr0);
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

// The rotated formats' store (q4r, q3r, q2r; kv_store.wgsl's STAGE 7, rope_kv.wgsl's PASS 2): a
// workgroup per (position, unit of kv heads). A unit is the fewest whole heads whose codes fill
// whole words (u·head_dim·bits a multiple of 32; one head from head_dim 32 on, or the row's last
// heads), so no two workgroups share a word. Each head is rotated exactly as the CPU oracle does
// (tern_reference::kv_codec::rotate_heads): x_i·σ_i, then the butterflies h = 1, 2, 4, … (pairs
// (j, j + h), j mod 2h < h: (a, b) ← (a + b, a − b), one rounding each, so the order of the pairs
// within a stage does not matter), then ·c (`g.rot_c`, the host's f32(1/√d)); then KIVI's min-max
// per head (minmax_pack, kivi_code: the value formats' exact code) with the (scale, min) word at
// par + p·heads + h, and the codes packed LSB-first (q3r: densely, code i at bits 3i..3i+2 of the
// row's bit string). head_dim ≤ 256 (the launcher checks): one value per invocation.
var<workgroup> rot_x: array<f32, 256>;
var<workgroup> rot_q: array<u32, 256>;
var<workgroup> rot_sm: array<u32, 32>;

fn rot_unit_heads() -> u32 {
    let tz = min(5u, countTrailingZeros(fmt_bits() * g.head_dim));
    return 1u << (5u - tz);
}

// Units per position (kv.rs's rot_units).
fn rot_units() -> u32 {
    let u = rot_unit_heads();
    return (g.heads + u - 1u) / u;
}

fn stage_rot(lid: u32, wid: u32) {
    let upt = rot_units();
    let t = wid / upt;
    let p = step.p0 + t;
    let u = rot_unit_heads();
    let h0 = (wid % upt) * u;
    // a workgroup past the batch or the context has nothing to do (nh = nv = 0; no early return:
    // the barriers below stay in uniform control flow)
    let live = t < g.n_tokens && p < g.n_ctx;
    let nh = select(0u, min(u, g.heads - h0), live);
    let d = g.head_dim;
    let nv = nh * d;
    let c0 = h0 * d;
    if (lid < nv) {
        let x = src_at(t, c0 + lid);
        rot_x[lid] = select(x, -x, rot_neg(lid % d));
    }
    for (var hh = 1u; hh < d; hh = hh * 2u) {
        workgroupBarrier();
        if (lid < nv / 2u) {
            let i = (lid / hh) * 2u * hh + lid % hh;
            let a = rot_x[i];
            let b = rot_x[i + hh];
            rot_x[i] = a + b;
            rot_x[i + hh] = a - b;
        }
    }
    workgroupBarrier();
    if (lid < nv) {
        rot_x[lid] = rot_x[lid] * g.rot_c;
    }
    workgroupBarrier();
    let bits = fmt_bits();
    let qmax = (1u << bits) - 1u;
    if (lid < nh) {
        var mn = 3.0e38;
        var mx = -3.0e38;
        for (var i = lid * d; i < (lid + 1u) * d; i = i + 1u) {
            mn = min(mn, rot_x[i]);
            mx = max(mx, rot_x[i]);
        }
        let sm = minmax_pack(mn, mx, f32(qmax));
        rot_sm[lid] = sm;
        cache_st(g.par + p * g.heads + h0 + lid, sm);
    }
    workgroupBarrier();
    if (lid < nv) {
        rot_q[lid] = kivi_code(rot_x[lid], rot_sm[lid / d], qmax);
    }
    workgroupBarrier();
    let nw = (nv * bits + 31u) / 32u;
    if (lid < nw) {
        let b0 = lid * 32u;
        let i_hi = min((b0 + 31u) / bits, nv - 1u);
        var word = 0u;
        for (var i = b0 / bits; i <= i_hi; i = i + 1u) {
            let bit = i * bits;
            if (bit >= b0) {
                word = word | (rot_q[i] << (bit - b0));
            } else {
                word = word | (rot_q[i] >> (b0 - bit));
            }
        }
        cache_st(code_base(p) + c0 * bits / 32u + lid, word);
    }
}
