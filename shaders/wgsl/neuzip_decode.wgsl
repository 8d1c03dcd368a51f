// NeuZip decode (runtime/format/src/neuzip, layouts 1 and 2): rANS-coded exponents in
// independent interleaved lanes, merged with the raw sign+mantissa plane. Bit-exact with
// `tern_format::neuzip::decode`: each invocation runs `rans::decode_lane`'s step verbatim.
//
// Workgroup of 256 invocations = `bpw` blocks × `lanes` invocations (bpw = ⌊256 / lanes⌋); the
// invocation for lane l of a block decodes that lane's symbols: symbol j of the block belongs to
// lane (j / group) mod lanes (group 1 in layout 1, 4 in layout 2), in increasing order. The
// 2048-entry decode table `lut[s] = (s − cdf) << 20 | pdf << 8 | sym` (`Plan::lut`) is built once
// on the CPU at upload and stored in `meta` just before the status word; every workgroup copies
// it into workgroup memory (8 KiB, 8 coalesced loads per invocation). A lane reads its 16-bit
// words as u32 pairs, the next pair loaded as soon as the current one is entered (its latency
// hidden behind the symbols in between). A lane that would read past its words, or does not end
// in state 2^15 having read exactly its words, sets `status`.
//
// Output (plain stores, no atomics: every word has one writer per dispatch): f32 elements one per
// word; 16-bit elements with `whole_words` = 1 (layout 2, every block starting on an even element)
// as two u32 words per group of 4 (no other lane touches them). Otherwise (layout 1, odd block
// starts) the launcher zeroes the output and dispatches twice: `whole_words` = 2 ORs the elements
// of even index (counted from out_base) into their words, 3 those of odd index; with one symbol
// per group and an even lane count a lane's elements all have one parity, and it sits out the
// other pass (which then does not check it: the pass that decodes it does).
//
// Bindings:
//   meta   : the blob from byte 0 up to the word section (header, table, block word bases, states,
//            lane starts), the 2048-word decode table, then one status word of the fused GEMV
//            (index status_word; the table at status_word − 2048)
//   data   : one chunk: words [words_base .. ) as u16 pairs from word 0, then (at u32 index
//            raw_word_offset) the raw plane from bit raw_bit_base on
//   out    : decoded elements from element out_base on: one per u32 (f32) or two per u32
//   status : [0] = 0 when every lane of this dispatch ended cleanly, else 1

struct Params {
    lanes: u32,
    block_len: u32,
    blocks_per_row: u32,
    row_len: u32,
    n_elements: u32,
    b0: u32,
    n_syms: u32,
    table_word: u32,
    block_words_word: u32,
    states_word: u32,
    lane_starts_word: u32,
    words_base: u32,
    raw_word_offset: u32,
    raw_bit_base: u32,
    out_base: u32,
    man: u32,
    exp_bits: u32,
    k: u32,
    width: u32,
    group: u32,
    bpw: u32,
    b_end: u32,
    status_word: u32,
    whole_words: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> meta_: array<u32>;
@group(0) @binding(2) var<storage, read> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;

var<workgroup> lut: array<u32, 2048>;

fn lane_start(b: u32, l: u32) -> u32 {
    let i = b * p.lanes + l;
    return (meta_[p.lane_starts_word + (i >> 1u)] >> (16u * (i & 1u))) & 0xffffu;
}

fn word(k: u32) -> u32 {
    let kk = k - p.words_base;
    return (data[kk >> 1u] >> (16u * (kk & 1u))) & 0xffffu;
}

// The (k + 1)-bit raw field of element i.
fn raw_field(i: u32) -> u32 {
    let wbits = p.k + 1u;
    let bit = i * wbits - p.raw_bit_base;
    let wi = p.raw_word_offset + (bit >> 5u);
    let sh = bit & 31u;
    var f = data[wi] >> sh;
    if (sh + wbits > 32u) {
        f = f | (data[wi + 1u] << (32u - sh));
    }
    return f & ((1u << wbits) - 1u);
}

// Exponent symbol + raw field f (k + 1 bits) → element bits (neuzip float::merge).
fn merge_f(sym: u32, f: u32) -> u32 {
    let sign = (f >> p.k) & 1u;
    let kept = f & ((1u << p.k) - 1u);
    return (sign << (p.man + p.exp_bits)) | (sym << p.man) | (kept << (p.man - p.k));
}

// Word i (0..3) of a group's raw window.
fn pick(r0: u32, r1: u32, r2: u32, r3: u32, i: u32) -> u32 {
    return select(select(select(r3, r2, i == 2u), r1, i == 1u), r0, i == 0u);
}

// The (k + 1)-bit field at bit s (< 96, s + k + 1 ≤ 128) of the window r0..r3.
fn field(r0: u32, r1: u32, r2: u32, r3: u32, s: u32) -> u32 {
    let wbits = p.k + 1u;
    let i = s >> 5u;
    let o = s & 31u;
    var f = pick(r0, r1, r2, r3, i) >> o;
    if (o + wbits > 32u) {
        f = f | (pick(r0, r1, r2, r3, i + 1u) << (32u - o));
    }
    return f & ((1u << wbits) - 1u);
}

// Lane state: rANS state x, next word k (first k0, end kend), the u32 pair holding word k (w0)
// and the three pairs after it (w1..w3, loaded ahead: a pair lasts ~12 symbols).
var<private> x: u32;
var<private> k: u32;
var<private> k0: u32;
var<private> kend: u32;
var<private> wi: u32;
var<private> w0: u32;
var<private> w1: u32;
var<private> w2: u32;
var<private> w3: u32;
var<private> bad: bool;

// One `rans::decode_lane` step: returns the symbol; sets `bad` when the lane has no word left to
// read (the lane's later steps then read nothing).
fn step() -> u32 {
    let e = lut[x & 0x7ffu];
    x = ((e >> 8u) & 0xfffu) * (x >> 11u) + (e >> 20u);
    if (x < 0x8000u) {
        if (k >= kend) {
            bad = true;
        } else {
            let h = (k - p.words_base) & 1u;
            if (h == 0u && k != k0) {
                // Entering the next pair: it was loaded ahead; load the third one after it.
                w0 = w1;
                w1 = w2;
                w2 = w3;
                wi = wi + 1u;
                w3 = data[wi + 3u];
            }
            x = (x << 16u) | ((w0 >> (16u * h)) & 0xffffu);
            k = k + 1u;
        }
    }
    return e & 0xffu;
}

// Groups of 4 symbols per lane decoded per round in the fast path: the round's raw words are
// loaded first, its symbols decoded while they arrive, then merged and stored.
const ROUND: u32 = 4u;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let lut_word = p.status_word - 2048u;
    for (var sl = lid; sl < 2048u; sl = sl + 256u) {
        lut[sl] = meta_[lut_word + sl];
    }
    workgroupBarrier();

    let bl = lid / p.lanes;
    let l = lid % p.lanes;
    let b = p.b0 + wg.x * p.bpw + bl;
    if (bl >= p.bpw || b >= p.b_end) {
        return;
    }
    // Block span (Plan::block_span).
    var start = 0u;
    var limit = p.n_elements;
    if (p.blocks_per_row == 1u) {
        start = b * p.block_len;
    } else {
        let row = b / p.blocks_per_row;
        start = row * p.row_len + (b % p.blocks_per_row) * p.block_len;
        limit = (row + 1u) * p.row_len;
    }
    let end = start + min(limit - start, p.block_len);
    let g = p.group;
    let span = p.lanes * g;
    let wbits = p.k + 1u;
    let mode = p.whole_words;
    let plain = p.width == 32u || mode == 1u;
    if (!plain && g == 1u && (p.lanes & 1u) == 0u && ((start + l - p.out_base) & 1u) != (mode & 1u)) {
        return;
    }
    let base = meta_[p.block_words_word + b];
    kend = meta_[p.block_words_word + b + 1u];
    if (l + 1u < p.lanes) {
        kend = base + lane_start(b, l + 1u);
    }
    x = meta_[p.states_word + b * p.lanes + l];
    k0 = base + lane_start(b, l);
    k = k0;
    wi = (k0 - p.words_base) >> 1u;
    w0 = data[wi];
    w1 = data[wi + 1u];
    w2 = data[wi + 2u];
    w3 = data[wi + 3u];
    bad = false;

    if (g == 4u && plain) {
        // Fast path (layout 2, whole-word or f32 output): rounds of ROUND groups.
        var j0 = start + l * 4u;
        while (j0 < end) {
            var rw: array<u32, 4u * ROUND>;
            for (var i = 0u; i < ROUND; i = i + 1u) {
                let jg = j0 + i * span;
                if (jg < end) {
                    let ri = p.raw_word_offset + ((jg * wbits - p.raw_bit_base) >> 5u);
                    rw[4u * i] = data[ri];
                    rw[4u * i + 1u] = data[ri + 1u];
                    rw[4u * i + 2u] = data[ri + 2u];
                    if (p.width == 32u) {
                        rw[4u * i + 3u] = data[ri + 3u];
                    }
                }
            }
            var sy: array<u32, ROUND>;
            for (var i = 0u; i < ROUND; i = i + 1u) {
                let jg = j0 + i * span;
                var s = 0u;
                if (jg < end) {
                    let n = min(4u, end - jg);
                    for (var q = 0u; q < n; q = q + 1u) {
                        s = s | (step() << (8u * q));
                    }
                }
                sy[i] = s;
            }
            if (bad) {
                break;
            }
            for (var i = 0u; i < ROUND; i = i + 1u) {
                let jg = j0 + i * span;
                if (jg < end) {
                    let n = min(4u, end - jg);
                    let sh = (jg * wbits - p.raw_bit_base) & 31u;
                    let o = jg - p.out_base;
                    var lo = 0u;
                    var hi = 0u;
                    for (var q = 0u; q < n; q = q + 1u) {
                        let f = field(rw[4u * i], rw[4u * i + 1u], rw[4u * i + 2u], rw[4u * i + 3u], sh + q * wbits);
                        let bits = merge_f((sy[i] >> (8u * q)) & 0xffu, f);
                        if (p.width == 32u) {
                            out[o + q] = bits;
                        } else {
                            // Words o/2 (elements 0, 1) and o/2 + 1 (2, 3); o is even.
                            let v = bits << (16u * (q & 1u));
                            if (q < 2u) {
                                lo = lo | v;
                            } else {
                                hi = hi | v;
                            }
                        }
                    }
                    if (p.width == 16u) {
                        out[o >> 1u] = lo;
                        if (n > 2u) {
                            out[(o >> 1u) + 1u] = hi;
                        }
                    }
                }
            }
            j0 = j0 + ROUND * span;
        }
    } else {
        // Any layout and output: one group at a time.
        for (var j0 = start + l * g; j0 < end; j0 = j0 + span) {
            let jn = min(j0 + g, end);
            // The group's raw fields: the words from the one holding element j0's field (at most
            // 4 fields of ≤ 24 bits from a bit offset < 32: < 128 bits, 4 words).
            let bit0 = j0 * wbits - p.raw_bit_base;
            let ri = p.raw_word_offset + (bit0 >> 5u);
            let need = ((bit0 & 31u) + (jn - j0) * wbits + 31u) >> 5u;
            let r0 = data[ri];
            var r1 = 0u;
            var r2 = 0u;
            var r3 = 0u;
            if (need > 1u) {
                r1 = data[ri + 1u];
            }
            if (need > 2u) {
                r2 = data[ri + 2u];
            }
            if (need > 3u) {
                r3 = data[ri + 3u];
            }
            var lo = 0u;
            var hi = 0u;
            for (var j = j0; j < jn; j = j + 1u) {
                let sym = step();
                if (bad) {
                    break;
                }
                let q = j - j0;
                let bits = merge_f(sym, field(r0, r1, r2, r3, (bit0 & 31u) + q * wbits));
                let o = j - p.out_base;
                if (p.width == 32u) {
                    out[o] = bits;
                } else if (plain) {
                    // Group from an even element: words o/2 (elements 0, 1) and o/2 + 1 (2, 3).
                    let v = bits << (16u * (q & 1u));
                    if (q < 2u) {
                        lo = lo | v;
                    } else {
                        hi = hi | v;
                    }
                } else if ((o & 1u) == (mode & 1u)) {
                    out[o >> 1u] = out[o >> 1u] | (bits << (16u * (o & 1u)));
                }
            }
            if (bad) {
                break;
            }
            if (p.width == 16u && plain) {
                let w = (j0 - p.out_base) >> 1u;
                out[w] = lo;
                if (jn > j0 + 2u) {
                    out[w + 1u] = hi;
                }
            }
        }
    }
    if (bad || x != 0x8000u || k != kend) {
        atomicStore(&status[0], 1u);
    }
}
