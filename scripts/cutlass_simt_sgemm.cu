// CUTLASS 2.x SIMT SGEMM (CUDA C++ compiled by ptxas, as perflab's kernels are) timed at the
// training shapes, to learn what such code reaches against cuBLAS on a GPU: a reference point
// for the best GEMM (#11). Prints a line per (shape, config, split): median ms of 20-launch
// loops timed by CUDA events (scripts/gemm_event_times.py times cuBLAS and perflab the same way).
// Built here, run there (the GPU machines have no nvcc); CUTLASS's headers come from its wheel:
//   pip download --no-deps nvidia-cutlass && unzip -q nvidia_cutlass-*.whl -d cutlass
//   I=cutlass/cutlass_library/source; nvcc -std=c++17 -O3 -arch=sm_90 -I$I/include \
//     -I$I/tools/util/include scripts/cutlass_simt_sgemm.cu -o cutlass_simt_sgemm
#include <cstdio>
#include <vector>
#include <algorithm>
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/gemm/device/gemm_splitk_parallel.h"

using RM = cutlass::layout::RowMajor;
using CM = cutlass::layout::ColumnMajor;

template <typename LA, typename LB, int BM, int BN, int BK, int WM, int WN, int S>
using Simt = cutlass::gemm::device::Gemm<float, LA, float, LB, float, RM, float, cutlass::arch::OpClassSimt,
    cutlass::arch::Sm80, cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WM, WN, BK>,
    cutlass::gemm::GemmShape<1, 1, 1>, cutlass::epilogue::thread::LinearCombination<float, 1, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, S>;

#define CK(x) do { auto e = (x); if (e != cudaSuccess) { printf("CUDA %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

template <typename G>
float time_gemm(const char* name, const char* cfg, int M, int N, int K, float* A, int lda, float* B, int ldb, float* D, int splits) {
    G gemm;
    typename G::Arguments args({M, N, K}, {A, lda}, {B, ldb}, {D, N}, {D, N}, {1.f, 0.f}, splits);
    size_t ws = G::get_workspace_size(args);
    void* work = nullptr;
    if (ws) CK(cudaMalloc(&work, ws));
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) { printf("%s %s cannot\n", name, cfg); return -1; }
    if (gemm.initialize(args, work) != cutlass::Status::kSuccess) { printf("%s %s init failed\n", name, cfg); return -1; }
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 5; ++i) gemm();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    const int reps = 20;
    for (int r = 0; r < 7; ++r) {
        cudaEventRecord(a);
        for (int i = 0; i < reps; ++i) gemm();
        cudaEventRecord(b);
        CK(cudaEventSynchronize(b));
        float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms / reps);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    if (work) cudaFree(work);
    printf("%s %s split%d %.5f ms %.2f TFLOP/s\n", name, cfg, splits, t[3], 2.0 * M * N * K / t[3] / 1e9);
    return t[3];
}

int main() {
    const int Hs[] = {512, 1024, 2048}, Bs[] = {800, 3200, 12000};
    float *A, *B, *D;
    size_t big = 2048ull * 12000;
    CK(cudaMalloc(&A, big * 4)); CK(cudaMalloc(&B, big * 4)); CK(cudaMalloc(&D, big * 4));
    std::vector<float> h(big);
    for (size_t i = 0; i < big; ++i) h[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    CK(cudaMemcpy(A, h.data(), big * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(B, h.data(), big * 4, cudaMemcpyHostToDevice));
    for (int H : Hs) for (int Bt : Bs) {
        char name[64];
        // fwd1: (H x 784)(784 x B): A row-major (k contiguous), B = X^T with X (B x 784) row-major: column-major B
        snprintf(name, 64, "fwd1_H=%d_B=%d", H, Bt);
        int M = H, N = Bt, K = 784;
        for (int s : {1, 2, 4}) {
            time_gemm<Simt<RM, CM, 128, 128, 8, 32, 64, 3>>(name, "128x128x8_w32x64_s3", M, N, K, A, K, B, K, D, s);
            time_gemm<Simt<RM, CM, 128, 128, 8, 32, 64, 4>>(name, "128x128x8_w32x64_s4", M, N, K, A, K, B, K, D, s);
            time_gemm<Simt<RM, CM, 128, 64, 8, 64, 32, 3>>(name, "128x64x8_w64x32_s3", M, N, K, A, K, B, K, D, s);
            time_gemm<Simt<RM, CM, 64, 64, 8, 32, 32, 4>>(name, "64x64x8_w32x32_s4", M, N, K, A, K, B, K, D, s);
        }
        // bwd3: (H x B)(B x 784) with A column-major and B row-major (training's bwd3, gemm_inputs.gemm_shapes,
        // has A row-major: this is the same product in another layout)
        snprintf(name, 64, "bwd3_H=%d_B=%d", H, Bt);
        M = H; N = 784; K = Bt;
        for (int s : {1, 2, 4}) {
            time_gemm<Simt<CM, RM, 128, 128, 8, 32, 64, 3>>(name, "128x128x8_w32x64_s3", M, N, K, A, M, B, N, D, s);
            time_gemm<Simt<CM, RM, 128, 128, 8, 32, 64, 4>>(name, "128x128x8_w32x64_s4", M, N, K, A, M, B, N, D, s);
            time_gemm<Simt<CM, RM, 128, 64, 8, 64, 32, 3>>(name, "128x64x8_w64x32_s3", M, N, K, A, M, B, N, D, s);
            time_gemm<Simt<CM, RM, 64, 64, 8, 32, 32, 4>>(name, "64x64x8_w32x32_s4", M, N, K, A, M, B, N, D, s);
        }
    }
    return 0;
}
