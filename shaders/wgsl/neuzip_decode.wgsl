// NeuZip decode (runtime/format/src/neuzip, layouts 1 and 2): rANS-coded exponents in
// independent interleaved lanes, merged with the raw sign+mantissa plane. Bit-exact with
// `tern_format::neuzip::decode`: each invocation runs `rans::decode_lane`'s step verbatim.
//
// Workgroup of 256 invocations = `bpw` blocks × `lanes` invocations (bpw = ⌊256 / lanes⌋); the
// invocation for lane l of a block decodes that lane's symbols: symbol j of the block belongs to
// lane (j / group) mod lanes (group 1 in layout 1, 4 in layout 2), in increasing order. The
// 2048-entry decode table `lut[s] = (s − cdf) << 20 | pdf << 8 | sym` (`Plan::lut`) is built in
// workgroup memory (8 KiB) from the blob's frequency table. A lane that would read past its words,
// or does not end in state 2^15 having read exactly its words, sets `status`.
//
// Output of 16-bit elements: with `whole_words` (layout 2, every block starting on an even
// element), a group of 4 is written as two plain u32 stores (no other lane touches those words,
// no clear needed); otherwise every element is OR-ed into its word (the output must be zeroed).
//
// Bindings:
//   meta   : the blob from byte 0 up to the word section (header, table, block word bases, states,
//            lane starts), then one status word of the fused GEMV (index status_word)
//   data   : one chunk: words [words_base .. ) as u16 pairs from word 0, then (at u32 index
//            raw_word_offset) the raw plane from bit raw_bit_base on
//   out    : decoded elements from element out_base on: one per u32 (f32) or two per u32
//   status : [0] = 0 when every lane of this dispatch ended cleanly, else 1

// #import common
// #import neuzip_stream

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> meta_: array<u32>;
@group(0) @binding(2) var<storage, read> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;

var<workgroup> lut: array<u32, 2048>;
var<workgroup> cdf: array<u32, 257>;

fn lane_start(b: u32, l: u32) -> u32 {
    let i = b * p.lanes + l;
    return (meta_[p.lane_starts_word + (i >> 1u)] >> (16u * (i & 1u))) & 0xffffu;
}

// Exponent symbol + raw field of element j → element bits (neuzip float::merge).
fn merge(sym: u32, j: u32) -> u32 {
    let f = raw_field(j);
    let sign = (f >> p.k) & 1u;
    let kept = f & ((1u << p.k) - 1u);
    return (sign << (p.man + p.exp_bits)) | (sym << p.man) | (kept << (p.man - p.k));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    // Decode table from the blob's frequency table: the running cdf (invocation 0, at most 256
    // entries), then every invocation fills 8 slots, finding each slot's symbol by binary search.
    if (lid == 0u) {
        var c = 0u;
        for (var i = 0u; i < p.n_syms; i = i + 1u) {
            cdf[i] = c;
            c = c + ((meta_[p.table_word + i] >> 16u) & 0xfffu);
        }
        cdf[p.n_syms] = c;
    }
    workgroupBarrier();
    for (var sl = lid; sl < 2048u; sl = sl + 256u) {
        var lo = 0u;
        var hi = p.n_syms;
        while (hi - lo > 1u) {
            let mid = (lo + hi) / 2u;
            if (cdf[mid] <= sl) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let e = meta_[p.table_word + lo];
        lut[sl] = ((sl - cdf[lo]) << 20u) | (((e >> 16u) & 0xfffu) << 8u) | (e & 0xffu);
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
    let base = meta_[p.block_words_word + b];
    var kend = meta_[p.block_words_word + b + 1u];
    if (l + 1u < p.lanes) {
        kend = base + lane_start(b, l + 1u);
    }
    var x = meta_[p.states_word + b * p.lanes + l];
    var k = base + lane_start(b, l);
    var bad = false;
    let g = p.group;
    let span = p.lanes * g;
    for (var j0 = start + l * g; j0 < end; j0 = j0 + span) {
        let jn = min(j0 + g, end);
        var lo = 0u;
        var hi = 0u;
        for (var j = j0; j < jn; j = j + 1u) {
            // rans::decode_lane, one step.
            let e = lut[x & 0x7ffu];
            let sym = e & 0xffu;
            x = ((e >> 8u) & 0xfffu) * (x >> 11u) + (e >> 20u);
            if (x < 0x8000u) {
                if (k >= kend) {
                    bad = true;
                    break;
                }
                x = (x << 16u) | word(k);
                k = k + 1u;
            }
            let bits = merge(sym, j);
            let o = j - p.out_base;
            if (p.width == 32u) {
                atomicStore(&out[o], bits);
            } else if (p.whole_words == 1u) {
                // Group of 4 from an even element: words o/2 (elements 0,1) and o/2+1 (2,3).
                let q = j - j0;
                let v = bits << (16u * (q & 1u));
                if (q < 2u) {
                    lo = lo | v;
                } else {
                    hi = hi | v;
                }
            } else {
                atomicOr(&out[o >> 1u], bits << (16u * (o & 1u)));
            }
        }
        if (bad) {
            break;
        }
        if (p.width == 16u && p.whole_words == 1u) {
            let w0 = (j0 - p.out_base) >> 1u;
            atomicStore(&out[w0], lo);
            if (jn > j0 + 2u) {
                atomicStore(&out[w0 + 1u], hi);
            }
        }
    }
    if (bad || x != 0x8000u || k != kend) {
        atomicStore(&status[0], 1u);
    }
}
