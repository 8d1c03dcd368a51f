// The KV cache formats, named once: each constant is `tern_format::KvQuant::index()` of its
// format (tern-gpu's registry test checks that), and `FMT` (the KV kernels' override, set by
// `KernelKey::constants`) is one of them. KIVI: q4, q3, q2; absmax: q8, a4, a3.

const FMT_F32: u32 = 0u;
const FMT_F16: u32 = 1u;
const FMT_Q8: u32 = 2u;
const FMT_Q4: u32 = 3u;
const FMT_Q3: u32 = 4u;
const FMT_Q2: u32 = 5u;
const FMT_A4: u32 = 6u;
const FMT_A3: u32 = 7u;
// Rotated KIVI (issue 28): CPU only for now — no GPU kernel is built for them (the registry
// leaves them out and the cache refuses them); named here so that every index has its name.
const FMT_Q4R: u32 = 8u;
const FMT_Q3R: u32 = 9u;
const FMT_Q2R: u32 = 10u;

// The cache's format: one of the FMT_* above.
override FMT: u32 = 0u;
