// llama.cpp's own quantizer through its C API (what llama-quantize runs: llama_model_quantize
// with the default parameters, no imatrix), for when the llama-quantize binary is not at hand.
//   quantize IN.gguf OUT.gguf FTYPE   (FTYPE: llama.h's LLAMA_FTYPE_MOSTLY_* number)
#include "llama.h"
#include <cstdio>
#include <cstdlib>

int main(int argc, char ** argv) {
    if (argc != 4) { fprintf(stderr, "usage: quantize IN OUT FTYPE\n"); return 2; }
    llama_backend_init();
    auto p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype) atoi(argv[3]);
    p.nthread = 2;
    return llama_model_quantize(argv[1], argv[2], &p) == 0 ? 0 : 1;
}
