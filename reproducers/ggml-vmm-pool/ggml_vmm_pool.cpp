// ggml-vmm-pool: does HAMi-core charge ggml-cuda's VMM pool? (the Lucebox / llama.cpp allocator)
//
// ggml-cuda's device pool, on a device with VMM (an H200, a Blackwell card; every Lucebox profile but
// sm120-cuda13-hami, which sets GGML_CUDA_NO_VMM=ON), reserves address space, cuMemCreate's a chunk,
// cuMemMap's it, cuMemSetAccess, and cuMemRelease's the handle right away: the mapping keeps the
// memory until the pool is freed. HAMi-core at 8f3a89c uncharges at cuMemRelease, 54b1305 charges no
// VMM memory at all: on every released HAMi the pool is outside the pod's usage and limit.
//
// Only ggml's public API (ggml.h, ggml-alloc.h, ggml-backend.h); the CUDA backend is found by name in
// ggml's registry ("CUDA0", --backend cpu for the CPU backend off the GPU). The client puts two f16
// weight matrices and an f32 bias in a backend buffer (cudaMalloc) and computes out = W2 (W1 x + b1):
// with f16 weights ggml-cuda runs cuBLAS and converts src1 and the f16 result in temporaries from its
// pool, (K + M) x batch x 2 bytes at once for the first mul_mat. Scenarios: `control` (a small batch:
// the weights are charged, the result matches a CPU reference), `vmm-pool-charged` (one large batch,
// LP_PARAM_POOL_BATCH columns, its result checked on 256 sampled columns: after the computes, with the
// pool alive, HAMi's usage beyond the weights must cover those temporaries). Usage is
// ggml_backend_dev_memory -> cudaMemGetInfo -> HAMi's cuMemGetInfo_v2 under CUDA_DEVICE_MEMORY_LIMIT.
// The same client shape as reproducers/ggml-client (whose thread scenarios have their own evidence).
//
// Output: lucepatch's event lines (reproducers/common/lp_report.h). Exit 0 = every check passed.
#include <cuda.h>  // lp_report.h names CUresults; the client itself calls no driver API

#include "lp_report.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int K = 1024;  // input features (W1's row length)
constexpr int M = 768;   // hidden (W1's rows, W2's row length)
constexpr int P = 512;   // outputs (W2's rows)
// f16 inputs and (at the default precision on sm_90) f16 cuBLAS compute: relative to the largest
// reference value; a wrong or garbage result is off by ~100%
constexpr double TOLERANCE = 2e-2;

std::mutex g_out;  // one writer of event lines at a time (ggml may call back on its own threads)
std::once_flag g_loaded;
std::string g_backend = "CUDA0";
std::string g_scenario;

bool check(const std::string &name, const std::string &want, const std::string &got, bool ok) {
    std::lock_guard<std::mutex> l(g_out);
    return lp_report_check(name.c_str(), want.c_str(), got.c_str(), ok) != 0;
}

void value(const std::string &name, long long v) {
    std::lock_guard<std::mutex> l(g_out);
    lp_report_value(name.c_str(), v);
}

struct Weights {
    std::vector<float> w1, b1, w2;  // f16-rounded values, as the backend holds them
    std::vector<ggml_fp16_t> w1h, w2h;
};

Weights make_weights(unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Weights w;
    w.w1.resize((size_t)M * K), w.b1.resize(M), w.w2.resize((size_t)P * M);
    for (auto &x : w.w1) x = u(rng) / std::sqrt((float)K);
    for (auto &x : w.b1) x = 0.1f * u(rng);
    for (auto &x : w.w2) x = u(rng) / std::sqrt((float)M);
    w.w1h.resize(w.w1.size()), w.w2h.resize(w.w2.size());
    ggml_fp32_to_fp16_row(w.w1.data(), w.w1h.data(), (int64_t)w.w1.size());
    ggml_fp32_to_fp16_row(w.w2.data(), w.w2h.data(), (int64_t)w.w2.size());
    for (size_t i = 0; i < w.w1.size(); i++) w.w1[i] = ggml_fp16_to_fp32(w.w1h[i]);
    for (size_t i = 0; i < w.w2.size(); i++) w.w2[i] = ggml_fp16_to_fp32(w.w2h[i]);
    return w;
}

// out[n][p] = sum_m W2[p][m] * (sum_k W1[m][k] x[n][k] + b1[m]), for every `stride`-th column
// (the others stay 0 and are not compared: a large batch is checked on a sample)
std::vector<float> reference(const Weights &w, const std::vector<float> &x, int n, int stride) {
    std::vector<float> out((size_t)n * P);
    std::vector<double> h(M);
    for (int j = 0; j < n; j += stride) {
        for (int m = 0; m < M; m++) {
            double s = w.b1[m];
            for (int k = 0; k < K; k++) s += (double)w.w1[(size_t)m * K + k] * x[(size_t)j * K + k];
            h[m] = s;
        }
        for (int p = 0; p < P; p++) {
            double s = 0;
            for (int m = 0; m < M; m++) s += (double)w.w2[(size_t)p * M + m] * h[m];
            out[(size_t)j * P + p] = (float)s;
        }
    }
    return out;
}

// The driver's version and device count, asked through the process's global scope (libggml-cuda
// NEEDS libcuda.so.1, so it is there; HAMi's exports come first in that scope): the runner's
// driver facts. Read-only calls, after ggml initialised CUDA.
void report_driver(const char *gpu) {
    using get_int = int (*)(int *);
    auto version = (get_int)dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
    auto count = (get_int)dlsym(RTLD_DEFAULT, "cuDeviceGetCount");
    int v = 0, n = 0;
    if (version) version(&v);
    if (count) count(&n);
    lp_report_driver(v, n, gpu);
}

long long used_bytes(ggml_backend_dev_t dev) {
    size_t free_b = 0, total = 0;
    ggml_backend_dev_memory(dev, &free_b, &total);
    return (long long)total - (long long)free_b;
}

// A declared parameter (reproducer.toml [params]): lucepatch always sets it.
long long param_int(const char *env) {
    const char *v = getenv(env);
    char *end = nullptr;
    long long n = v && *v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || n <= 0) {
        fprintf(stderr, "ggml_client: %s=%s is not a positive integer (a declared parameter: lucepatch sets it)\n", env,
                v ? v : "(unset)");
        exit(2);
    }
    return n;
}

// The whole client on the calling thread; `tag` names its checks and values. `pool_floor` > 0: after
// the computes (the pool alive, the weights still allocated) HAMi's usage must exceed the weights by
// at least that many bytes, a lower bound of what ggml's VMM pool has mapped.
bool run_client(const std::string &tag, unsigned seed, const std::vector<int> &batches,
                long long pool_floor = 0) {
    bool ok = true;
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(g_backend.c_str());
    if (!dev) {
        ggml_backend_load_all();  // a GGML_BACKEND_DL build registers its backends only when loaded
        dev = ggml_backend_dev_by_name(g_backend.c_str());
    }
    if (!dev) {
        std::string why = "no-gpu: ggml has no " + g_backend + " device (" + std::to_string(ggml_backend_dev_count()) +
                          " devices registered: no CUDA backend in this ggml build, or no GPU)";
        lp_skip(g_scenario.c_str(), why.c_str());
    }
    const bool cuda = g_backend != "CPU";
    ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
    if (!check(tag + ": ggml_backend_dev_init(" + g_backend + ")", "a backend", backend ? "a backend" : "NULL",
               backend != nullptr))
        return false;
    std::call_once(g_loaded, [&] {  // CUDA is initialised now (HAMi too); nothing computed yet
        std::lock_guard<std::mutex> l(g_out);
        lp_report_loaded();
        if (cuda) report_driver(ggml_backend_dev_description(dev));
    });
    const long long used0 = cuda ? used_bytes(dev) : 0;

    Weights w = make_weights(seed);
    ggml_init_params wp = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context *wctx = ggml_init(wp);
    ggml_tensor *W1 = ggml_new_tensor_2d(wctx, GGML_TYPE_F16, K, M);
    ggml_tensor *B1 = ggml_new_tensor_1d(wctx, GGML_TYPE_F32, M);
    ggml_tensor *W2 = ggml_new_tensor_2d(wctx, GGML_TYPE_F16, M, P);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(wctx, backend);
    if (!check(tag + ": weights buffer", "allocated", wbuf ? "allocated" : "NULL", wbuf != nullptr))
        return false;
    const long long wbytes = (long long)ggml_backend_buffer_get_size(wbuf);
    ggml_backend_tensor_set(W1, w.w1h.data(), 0, ggml_nbytes(W1));
    ggml_backend_tensor_set(B1, w.b1.data(), 0, ggml_nbytes(B1));
    ggml_backend_tensor_set(W2, w.w2h.data(), 0, ggml_nbytes(W2));
    if (cuda) {
        const long long charged = used_bytes(dev) - used0;
        value(tag + ".weights_bytes", wbytes);
        value(tag + ".accounted_weights_delta", charged);
        ok &= check(tag + ": HAMi's usage grows by at least the weights buffer (cudaMalloc)",
                    ">= " + std::to_string(wbytes), std::to_string(charged), charged >= wbytes);
    }

    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int iter = 0;
    for (int n : batches) {
        ggml_init_params gp = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr, true};
        ggml_context *gctx = ggml_init(gp);
        ggml_tensor *X = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, K, n);
        ggml_set_input(X);
        ggml_tensor *H = ggml_add(gctx, ggml_mul_mat(gctx, W1, X), B1);
        ggml_tensor *Y = ggml_mul_mat(gctx, W2, H);
        ggml_set_output(Y);
        ggml_cgraph *gf = ggml_new_graph(gctx);
        ggml_build_forward_expand(gf, Y);
        ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
        const std::string it = tag + ": batch " + std::to_string(n) + " (compute " + std::to_string(++iter) + ")";
        bool alloc_ok = ggml_gallocr_alloc_graph(galloc, gf);
        ok &= check(it + ": graph allocated", "true", alloc_ok ? "true" : "false", alloc_ok);
        if (alloc_ok) {
            std::vector<float> x((size_t)K * n);
            for (auto &v : x) v = u(rng);
            ggml_backend_tensor_set(X, x.data(), 0, ggml_nbytes(X));
            enum ggml_status st = ggml_backend_graph_compute(backend, gf);
            ok &= check(it + ": ggml_backend_graph_compute", "GGML_STATUS_SUCCESS", ggml_status_to_string(st),
                        st == GGML_STATUS_SUCCESS);
            std::vector<float> y((size_t)P * n);
            ggml_backend_tensor_get(Y, y.data(), 0, ggml_nbytes(Y));
            const int stride = std::max(1, n / 256);
            std::vector<float> ref = reference(w, x, n, stride);
            double max_err = 0, max_ref = 0;
            bool finite = true;
            for (int j = 0; j < n; j += stride) {
                for (int q = 0; q < P; q++) {
                    const size_t i = (size_t)j * P + q;
                    finite &= std::isfinite(y[i]);
                    max_err = std::max(max_err, (double)std::fabs(y[i] - ref[i]));
                    max_ref = std::max(max_ref, (double)std::fabs(ref[i]));
                }
            }
            const double rel = finite ? max_err / std::max(max_ref, 1e-30) : INFINITY;
            char got[64];
            snprintf(got, sizeof got, "%.3g", rel);
            ok &= check(it + ": max |ggml - CPU reference| / max |reference|", "<= " + std::to_string(TOLERANCE), got,
                        rel <= TOLERANCE);
        }
        ggml_gallocr_free(galloc);
        ggml_free(gctx);
    }
    if (cuda) {
        const long long after = used_bytes(dev) - used0;
        value(tag + ".accounted_after_computes_delta", after);
        if (pool_floor > 0) {
            // ggml's VMM pool stays mapped until the backend is freed; ggml releases each handle right
            // after mapping it, so only a hook that charges until the unmap sees it
            value(tag + ".pool_floor_bytes", pool_floor);
            ok &= check(tag + ": HAMi's usage beyond the weights covers ggml's VMM pool (>= its temporaries)",
                        ">= " + std::to_string(pool_floor), std::to_string(after - wbytes), after - wbytes >= pool_floor);
        }
    }
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    ggml_backend_free(backend);
    if (cuda) value(tag + ".accounted_after_free_delta", used_bytes(dev) - used0);
    return ok;
}

}  // namespace

int main(int argc, char **argv) {
    std::string scenario;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--backend" && i + 1 < argc) {
            std::string b = argv[++i];
            g_backend = (b == "cpu" || b == "CPU") ? "CPU" : b;
        } else {
            scenario = a;
        }
    }
    g_scenario = scenario;
    bool ok;
    if (scenario == "control") {
        ok = run_client("main", 1234u, {64, 256});
    } else if (scenario == "vmm-pool-charged") {
        // one large batch: the first mul_mat holds src1 and the result as f16 temporaries from ggml's
        // pool at once, (K + M) * n * 2 bytes at least
        const int n = (int)param_int("LP_PARAM_POOL_BATCH");
        ok = run_client("main", 1234u, {64, n}, (long long)(K + M) * n * 2);
    } else {
        fprintf(stderr, "usage: %s [--backend cpu|CUDA0] control|vmm-pool-charged\n", argv[0]);
        return 2;
    }
    lp_report_done(scenario.c_str(), ok);
    return ok ? 0 : 1;
}
