// The copy-engine exchange's handshake (perflab.train.comm.P2PComm): one-thread kernels, so the copies
// between GPUs need no SM and a CUDA graph can hold the whole exchange. Counters only grow, so a
// replayed graph never has to reset one.
#ifndef __CUDACC_RTC__
extern "C" __host__ __device__ int printf(const char*, ...);  // NVRTC has it built in, nvcc wants it declared
#endif

// The count-th signal: write count into each peer's flag (the peers' memory, mapped through CUDA
// IPC), after everything before it in the stream (the copies into the peers) has landed.
extern "C" __global__ void p2p_signal(const unsigned long long* peer_flags, int peers, unsigned long long* count) {
    unsigned long long n = *count + 1;
    *count = n;
    __threadfence_system();
    for (int i = 0; i < peers; ++i)
        *(volatile unsigned long long*)peer_flags[i] = n;
    __threadfence_system();
}

// The count-th wait: return once every flag >= count - lag (lag 1: the peers are at most one
// round behind). After timeout_ns a peer is taken for dead: the kernel says which and traps, so
// the host's next synchronize raises instead of hanging.
extern "C" __global__ void p2p_wait(const unsigned long long* flags, int peers, unsigned long long* count, int lag,
                                    long long timeout_ns) {
    unsigned long long n = *count + 1;
    *count = n;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < peers; ++i) {
        while (((const volatile unsigned long long*)flags)[i] + lag < n) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if ((long long)(t - t0) > timeout_ns) {
                printf("perflab p2p exchange: peer slot %d sent nothing for %lld ns (it died or runs other steps)\n",
                       i, timeout_ns);
                __trap();
            }
        }
    }
    __threadfence_system();
}
