// The golden-vector oracle: llama.cpp's own quantizer and dequantizer (ggml-base's type traits,
// i.e. quantize_row_*_ref and dequantize_row_* from ggml/src/ggml-quants.c).
//   ggml_oracle quant   TYPE N IN.f32  OUT.blocks OUT.deq.f32   quantize N floats, then dequantize
//   ggml_oracle dequant TYPE N IN.blocks OUT.deq.f32            dequantize N elements of raw blocks
// Built by gen_golden.py against the vendored llama.cpp build's libggml-base.a.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"

static void * slurp(const char * path, size_t want) {
    FILE * f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    void * buf = malloc(want ? want : 1);
    if (fread(buf, 1, want, f) != want) { fprintf(stderr, "%s: short read\n", path); exit(1); }
    fclose(f);
    return buf;
}

static void spit(const char * path, const void * buf, size_t n) {
    FILE * f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

int main(int argc, char ** argv) {
    if (argc < 5) { fprintf(stderr, "usage: see source\n"); return 2; }
    const enum ggml_type type = (enum ggml_type) atoi(argv[2]);
    const int64_t n = atoll(argv[3]);
    const struct ggml_type_traits * tt = ggml_get_type_traits(type);
    const size_t nbytes = ggml_row_size(type, n);
    float * deq = malloc(n * sizeof(float));
    if (strcmp(argv[1], "quant") == 0) {
        float * x = slurp(argv[4], n * sizeof(float));
        void * blocks = calloc(1, nbytes);
        tt->from_float_ref(x, blocks, n);
        tt->to_float(blocks, deq, n);
        spit(argv[5], blocks, nbytes);
        spit(argv[6], deq, n * sizeof(float));
    } else {
        void * blocks = slurp(argv[4], nbytes);
        tt->to_float(blocks, deq, n);
        spit(argv[5], deq, n * sizeof(float));
    }
    return 0;
}
