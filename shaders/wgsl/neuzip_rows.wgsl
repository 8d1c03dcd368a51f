// NeuZip row decoding shared by neuzip_gemv.wgsl and neuzip_embed.wgsl (imported by both):
// the chunk Params (`neuzip_decode.wgsl`'s), the rANS decode table built in workgroup memory, the
// stream readers and the element conversion, exactly as `neuzip_decode.wgsl` decodes. The kernel
// declares `p` (Params), `meta_` (array<atomic<u32>>) and `data` (array<u32>).

// #import neuzip_stream

var<workgroup> lut: array<u32, 2048>;
var<workgroup> cdf: array<u32, 257>;

fn lane_start(b: u32, l: u32) -> u32 {
    let i = b * p.lanes + l;
    return (atomicLoad(&meta_[p.lane_starts_word + (i >> 1u)]) >> (16u * (i & 1u))) & 0xffffu;
}

// Exponent symbol + raw field of element j → the element as f32 (bit-exact conversion).
fn value(sym: u32, j: u32) -> f32 {
    let f = raw_field(j);
    let sign = (f >> p.k) & 1u;
    let kept = f & ((1u << p.k) - 1u);
    let bits = (sign << (p.man + p.exp_bits)) | (sym << p.man) | (kept << (p.man - p.k));
    if (p.width == 32u) {
        return bitcast<f32>(bits);
    }
    if (p.man == 10u) {
        return f16_bits_to_f32(bits);
    }
    return bitcast<f32>(bits << 16u);
}

// Decode table from the blob's frequency table: the running cdf (invocation 0, at most 256
// entries), then every invocation of the 256 fills 8 slots, finding each slot's symbol by
// binary search. Call from uniform control flow (it has barriers).
fn build_table(lid: u32) {
    if (lid == 0u) {
        var c = 0u;
        for (var i = 0u; i < p.n_syms; i = i + 1u) {
            cdf[i] = c;
            c = c + ((atomicLoad(&meta_[p.table_word + i]) >> 16u) & 0xfffu);
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
        let e = atomicLoad(&meta_[p.table_word + lo]);
        lut[sl] = ((sl - cdf[lo]) << 20u) | (((e >> 16u) & 0xfffu) << 8u) | (e & 0xffu);
    }
    workgroupBarrier();
}
