// llama-mem-probe: load a GGUF in llama.cpp with no_alloc (no weights read, no memory allocated)
// and print, as JSON, the exact bytes llama.cpp would allocate per buffer type: model, context (KV)
// and compute. gemma-fit's tests compare its estimates with these numbers.
//
// usage: llama-mem-probe MODEL.gguf n_ctx n_batch n_ubatch n_seq_max flash_attn(-1 auto,0,1)
//                        type_k type_v swa_full(0/1) kv_unified(0/1) n_outputs_max
//        llama-mem-probe MODEL.gguf --batch
// type_k/type_v are ggml type ids (1 = f16, 8 = q8_0 ...).
//
// --batch loads the model once (most of a probe's time: the vocabulary and the tensor list) and reads
// one line of the ten numbers above per context from stdin; for each it creates a context on the loaded
// model, prints one JSON line (or {"error": ...} when the context cannot be created) and frees it again.
#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// The ten context numbers, in the order of the command line: false when there are not ten integers.
static bool context_params(const std::vector<std::string> & v, llama_context_params & cp) {
    if (v.size() != 10) {
        return false;
    }
    long n[10];
    for (size_t i = 0; i < 10; i++) {
        char * end = nullptr;
        n[i] = strtol(v[i].c_str(), &end, 10);
        if (end == v[i].c_str() || *end != '\0') {
            return false;
        }
    }
    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) n[0];
    cp.n_batch = (uint32_t) n[1];
    cp.n_ubatch = (uint32_t) n[2];
    cp.n_seq_max = (uint32_t) n[3];
    const long fa = n[4];
    cp.flash_attn_type = fa < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO : fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = (ggml_type) n[5];
    cp.type_v = (ggml_type) n[6];
    cp.swa_full = n[7] != 0;
    cp.kv_unified = n[8] != 0;
    cp.n_outputs_max = (uint32_t) n[9];
    return true;
}

// One context: its JSON line on stdout; false (and a message on stderr) when llama.cpp refuses it.
static bool probe(llama_model * model, const llama_context_params & cp) {
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "failed to create context\n");
        return false;
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
    fflush(stdout);
    llama_free(ctx);
    return true;
}

int main(int argc, char ** argv) {
    const bool batch = argc == 3 && std::string(argv[2]) == "--batch";
    llama_context_params cp;
    if (!batch && !(argc == 12 && context_params(std::vector<std::string>(argv + 2, argv + 12), cp))) {
        fprintf(stderr, "usage: %s MODEL n_ctx n_batch n_ubatch n_seq_max fa type_k type_v swa_full kv_unified n_outputs_max\n"
                        "       %s MODEL --batch   (those ten numbers per line on stdin, one JSON line out each)\n",
                argv[0], argv[0]);
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
    int status = 0;
    if (!batch) {
        status = probe(model, cp) ? 0 : 1;
    } else {
        std::string line;
        while (std::getline(std::cin, line)) {
            std::istringstream words(line);
            std::vector<std::string> v;
            for (std::string w; words >> w;) {
                v.push_back(w);
            }
            if (v.empty()) {
                continue;
            }
            if (!context_params(v, cp)) {
                printf("{\"error\": \"expected ten integers\"}\n");
                fflush(stdout);
                status = 2;
            } else if (!probe(model, cp)) {
                printf("{\"error\": \"failed to create context\"}\n");
                fflush(stdout);
                status = 1;
            }
        }
    }
    llama_model_free(model);
    llama_backend_free();
    return status;
}
