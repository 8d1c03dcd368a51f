// The TopK 50% radix select (issue 13, h-topk): the threshold passes and the ties' ranks of
// act_quant_topk.wgsl's select, imported by act_quant_topk.wgsl and to
// ternary_gemv_dec_norm.wgsl (its TopK prologue, ACT4 = 2), so both run the same code: the same
// threshold T, the same ties kept, the same bits. The method is described in act_quant_topk.wgsl's
// header.
//
// The kernel declares: `WG` (= 256, the workgroup size), `redm: array<u32, 256>` and
// `redm32: array<u32, 32>` (the scans' scratch), `st: vec4<u32>` (the select's state: lo, hi,
// want, done; done 0 = go on, 1 = T = lo with `want` ties of T to keep by rank, 2 = keep every
// key ≥ lo), the 1024 histogram bins behind `hist_add(b)` / `hist_load(b)` / `hist_clear(b)`
// (act_quant_topk.wgsl: an array of its own; the GEMV: its group sums, aliased), and
// `topk_y(base, c, r)`: column c's value y of the row at `base` (the long-row path re-reads it).

const NB: u32 = 1024u; // radix bins per pass (4 per invocation)
const WIN: u32 = 0x4000000u; // pass 0's window: 2^26 keys below the largest
const PASSES: u32 = 6u; // ≥ 1 (window) + 4 (31-bit range, ≥ 10 bits a pass) + 1
const TOPK_REG: u32 = 12u; // values per invocation held in registers (rows of n ≤ 3072)

// The reference's order key: bits(|v|) + 1, NaN 0.
fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v) & 0x7fffffffu;
    if (b > 0x7f800000u) {
        return 0u;
    }
    return b + 1u;
}

// (Σ_{j > lid} v_j, Σ_j v_j) over the invocations' counts; two barriers (16 groups of 16: the
// group totals, then each invocation adds the groups above its own and its group's lanes above
// it, all loads independent). Every invocation must call it; `redm` / `redm32` as tree_sum.
fn suffix(lid: u32, v: u32) -> vec2<u32> {
    redm[lid] = v;
    workgroupBarrier();
    if (lid < 16u) {
        let g = 16u * lid;
        redm32[lid] = redm[g + 0u] + redm[g + 1u] + redm[g + 2u] + redm[g + 3u] + redm[g + 4u] + redm[g + 5u] + redm[g + 6u] + redm[g + 7u] + redm[g + 8u] + redm[g + 9u] + redm[g + 10u] + redm[g + 11u] + redm[g + 12u] + redm[g + 13u] + redm[g + 14u] + redm[g + 15u];
    }
    workgroupBarrier();
    let grp = lid / 16u;
    let g0 = 16u * grp;
    var above = 0u;
    var total = 0u;
    above = above + select(0u, redm[g0 + 0u], g0 + 0u > lid);
    above = above + select(0u, redm[g0 + 1u], g0 + 1u > lid);
    above = above + select(0u, redm[g0 + 2u], g0 + 2u > lid);
    above = above + select(0u, redm[g0 + 3u], g0 + 3u > lid);
    above = above + select(0u, redm[g0 + 4u], g0 + 4u > lid);
    above = above + select(0u, redm[g0 + 5u], g0 + 5u > lid);
    above = above + select(0u, redm[g0 + 6u], g0 + 6u > lid);
    above = above + select(0u, redm[g0 + 7u], g0 + 7u > lid);
    above = above + select(0u, redm[g0 + 8u], g0 + 8u > lid);
    above = above + select(0u, redm[g0 + 9u], g0 + 9u > lid);
    above = above + select(0u, redm[g0 + 10u], g0 + 10u > lid);
    above = above + select(0u, redm[g0 + 11u], g0 + 11u > lid);
    above = above + select(0u, redm[g0 + 12u], g0 + 12u > lid);
    above = above + select(0u, redm[g0 + 13u], g0 + 13u > lid);
    above = above + select(0u, redm[g0 + 14u], g0 + 14u > lid);
    above = above + select(0u, redm[g0 + 15u], g0 + 15u > lid);
    let t0 = redm32[0u];
    above = above + select(0u, t0, 0u > grp);
    let t1 = redm32[1u];
    above = above + select(0u, t1, 1u > grp);
    let t2 = redm32[2u];
    above = above + select(0u, t2, 2u > grp);
    let t3 = redm32[3u];
    above = above + select(0u, t3, 3u > grp);
    let t4 = redm32[4u];
    above = above + select(0u, t4, 4u > grp);
    let t5 = redm32[5u];
    above = above + select(0u, t5, 5u > grp);
    let t6 = redm32[6u];
    above = above + select(0u, t6, 6u > grp);
    let t7 = redm32[7u];
    above = above + select(0u, t7, 7u > grp);
    let t8 = redm32[8u];
    above = above + select(0u, t8, 8u > grp);
    let t9 = redm32[9u];
    above = above + select(0u, t9, 9u > grp);
    let t10 = redm32[10u];
    above = above + select(0u, t10, 10u > grp);
    let t11 = redm32[11u];
    above = above + select(0u, t11, 11u > grp);
    let t12 = redm32[12u];
    above = above + select(0u, t12, 12u > grp);
    let t13 = redm32[13u];
    above = above + select(0u, t13, 13u > grp);
    let t14 = redm32[14u];
    above = above + select(0u, t14, 14u > grp);
    let t15 = redm32[15u];
    above = above + select(0u, t15, 15u > grp);
    total = t0 + t1 + t2 + t3 + t4 + t5 + t6 + t7 + t8 + t9 + t10 + t11 + t12 + t13 + t14 + t15;
    return vec2<u32>(above, total);
}

// Add key kc to the histogram of range [lo, hi) (bins of 2^shift keys).
fn bin_add(kc: u32, lo: u32, hi: u32, shift: u32) {
    if (kc >= lo && kc < hi) {
        hist_add((kc - lo) >> shift);
    }
}

// One select step after the histogram is complete: find the bin holding the want-th largest key of
// [lo, hi) and write the next state (one invocation writes it); the bins are cleared for the next
// pass. Every invocation must call it.
fn select_step(lid: u32, lo: u32, hi: u32, want: u32, shift: u32) {
    let h0 = hist_load(4u * lid);
    let h1 = hist_load(4u * lid + 1u);
    let h2 = hist_load(4u * lid + 2u);
    let h3 = hist_load(4u * lid + 3u);
    let tot = (h0 + h1) + (h2 + h3);
    let sc = suffix(lid, tot); // its first barrier orders the reads above before the clears
    for (var e = 0u; e < 4u; e = e + 1u) {
        hist_clear(4u * lid + e);
    }
    var above = sc.x; // keys of [lo, hi) in bins above this invocation's four
    let incl = above + tot;
    if (above < want && incl >= want) {
        let h = vec4<u32>(h0, h1, h2, h3);
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

// Column c's value into the histogram (columns past the row are not binned).
fn bin_y(c: u32, n: u32, yv: f32, lo: u32, hi: u32, shift: u32) {
    if (c < n) {
        bin_add(key(yv), lo, hi, shift);
    }
}

// The threshold of the row at `base` (n values, k = ⌊n/2⌋ to keep, amax_bits the largest |y|'s
// bits): the final select state (T = .x, ties to keep by rank = .z, .w == 1 when ranks are
// needed). Rows of n ≤ TOPK_REG · WG (`fast`) bin the invocation's values y0 … y11 (columns lid,
// lid + 256, …); longer rows re-read `topk_y`. The bins must be zero on entry; they are zero
// again on return. Every invocation must call it.
fn topk_select(
    lid: u32, n: u32, base: u32, r: f32, fast: bool, amax_bits: u32, k: u32,
    y0: f32, y1: f32, y2: f32, y3: f32, y4: f32, y5: f32,
    y6: f32, y7: f32, y8: f32, y9: f32, y10: f32, y11: f32,
) -> vec4<u32> {
    if (lid == 0u) {
        if (k == 0u) {
            st = vec4<u32>(0xffffffffu, 0u, 0u, 2u); // nothing is kept
        } else {
            let hi0 = amax_bits + 2u; // one past the largest key (bits + 1)
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
        // (the bins were cleared at the start or by the previous pass's select_step)
        if (fast) {
            bin_y(lid + 0u * WG, n, y0, lo, hi, shift);
            bin_y(lid + 1u * WG, n, y1, lo, hi, shift);
            bin_y(lid + 2u * WG, n, y2, lo, hi, shift);
            bin_y(lid + 3u * WG, n, y3, lo, hi, shift);
            bin_y(lid + 4u * WG, n, y4, lo, hi, shift);
            bin_y(lid + 5u * WG, n, y5, lo, hi, shift);
            bin_y(lid + 6u * WG, n, y6, lo, hi, shift);
            bin_y(lid + 7u * WG, n, y7, lo, hi, shift);
            bin_y(lid + 8u * WG, n, y8, lo, hi, shift);
            bin_y(lid + 9u * WG, n, y9, lo, hi, shift);
            bin_y(lid + 10u * WG, n, y10, lo, hi, shift);
            bin_y(lid + 11u * WG, n, y11, lo, hi, shift);
        } else {
            for (var c = lid; c < n; c = c + WG) {
                bin_add(key(topk_y(base, c, r)), lo, hi, shift);
            }
        }
        workgroupBarrier();
        select_step(lid, lo, hi, s4.z, shift);
    }
    return workgroupUniformLoad(&st);
}

// Ties straddling the cut: the invocation owns the packed words [wa, wb) (columns 4·wa .. 4·wb);
// returns how many columns with key == t lie before its run (its run's ties counted, then a
// scan). Every invocation must call it.
fn topk_ties_before(lid: u32, n: u32, base: u32, r: f32, t: u32, wa: u32, wb: u32) -> u32 {
    var ties = 0u;
    for (var c = 4u * wa; c < min(4u * wb, n); c = c + 1u) {
        if (key(topk_y(base, c, r)) == t) {
            ties = ties + 1u;
        }
    }
    let sc = suffix(lid, ties);
    return sc.y - sc.x - ties;
}

// |v| as bits for the absmax (NaN: 0, which the max skips).
fn abs_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v) & 0x7fffffffu;
    return select(0u, b, b <= 0x7f800000u);
}
