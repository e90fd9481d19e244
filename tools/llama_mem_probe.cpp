// llama-mem-probe: load a GGUF in llama.cpp with no_alloc (no weights read, no memory allocated)
// and print, as JSON, the exact bytes llama.cpp would allocate per buffer type: model, context (KV)
// and compute. gemma-fit's tests compare its estimates with these numbers.
//
// usage: llama-mem-probe MODEL.gguf n_ctx n_batch n_ubatch n_seq_max flash_attn(-1 auto,0,1)
//                        type_k type_v swa_full(0/1) kv_unified(0/1) n_outputs_max
// type_k/type_v are ggml type ids (1 = f16, 8 = q8_0 ...).
#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstdlib>
#include <string>

static void quiet(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

int main(int argc, char ** argv) {
    if (argc != 12) {
        fprintf(stderr, "usage: %s MODEL n_ctx n_batch n_ubatch n_seq_max fa type_k type_v swa_full kv_unified n_outputs_max\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.no_alloc = true;
    mp.load_mode = LLAMA_LOAD_MODE_NONE;  // what llama-fit-params does: simulate, map nothing
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "failed to load model\n");
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) atoi(argv[2]);
    cp.n_batch = (uint32_t) atoi(argv[3]);
    cp.n_ubatch = (uint32_t) atoi(argv[4]);
    cp.n_seq_max = (uint32_t) atoi(argv[5]);
    const int fa = atoi(argv[6]);
    cp.flash_attn_type = fa < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO : fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = (ggml_type) atoi(argv[7]);
    cp.type_v = (ggml_type) atoi(argv[8]);
    cp.swa_full = atoi(argv[9]) != 0;
    cp.kv_unified = atoi(argv[10]) != 0;
    cp.n_outputs_max = (uint32_t) atoi(argv[11]);
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "failed to create context\n");
        return 1;
    }
    const llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);
    printf("{\"n_ctx\": %u, \"buffers\": {", llama_n_ctx(ctx));
    bool first = true;
    for (const auto & [buft, data] : mb) {
        printf("%s\"%s\": {\"model\": %zu, \"context\": %zu, \"compute\": %zu}", first ? "" : ", ",
               ggml_backend_buft_name(buft), data.model, data.context, data.compute);
        first = false;
    }
    printf("}}\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
