"""Kernels of known kinds, for the kernel analyzers' fixtures (issue 20): each has one limiter a performance
engineer would name, so a capture of them under Nsight Compute says whether gpudiag names it too.

- ``naive_gemm``: one thread per output element, every operand read from global memory in the inner loop
  (no reuse through shared memory). L1/LSU-bound with a middling L2 hit rate: tiling is the fix.
- ``tiled_gemm``: the same product through 32x32 shared-memory tiles: far fewer global loads per FMA.
- ``stream_add``: ``c = a + b`` over 3 x 256 MiB, each byte touched once. DRAM-bound at close to peak with a
  low L2 hit rate that no cache can raise (compulsory misses): fuse passes or use fewer bytes.
- ``strided_copy``: ``out[i] = in[i * 32]``: each warp's 32 loads touch 32 different 32-byte sectors
  (one useful float in eight): uncoalesced, excess sectors per request.
- ``transpose_naive``: reads coalesced, writes strided by the matrix width: uncoalesced stores.
- ``transpose_tiled_conflicts``: through a 32x32 shared-memory tile, both global accesses coalesced, but the
  tile is read down its columns: a warp's 32 reads hit one bank (32-way bank conflicts).
- ``transpose_tiled``: the same with the tile padded to 32x33: no conflicts, DRAM-bound (issue 32 (c)).
  These two run after the others (added 2026-12-05), so the earlier kernels keep their launch IDs.

Each kernel is launched twice (the first a warm-up). Run under ncu (part `kinds` of tools/gpu_capture_fixtures.sh)::

    ncu --clock-control none --set full --import-source yes -f -o kinds python3 examples/ncu_kernel_kinds.py
"""

import cupy as cp

SOURCE = r"""
extern "C" __global__ void naive_gemm(const float* a, const float* b, float* c, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n || col >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) {
        acc += a[row * n + k] * b[k * n + col];
    }
    c[row * n + col] = acc;
}

#define TILE 32
extern "C" __global__ void tiled_gemm(const float* a, const float* b, float* c, int n) {
    __shared__ float ta[TILE][TILE];
    __shared__ float tb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += TILE) {
        ta[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];
        tb[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        }
        __syncthreads();
    }
    c[row * n + col] = acc;
}

extern "C" __global__ void stream_add(const float* a, const float* b, float* c, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        c[i] = a[i] + b[i];
    }
}

extern "C" __global__ void strided_copy(const float* in, float* out, long long n, int stride) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i * stride];
    }
}

extern "C" __global__ void transpose_naive(const float* in, float* out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < n && y < n) {
        out[x * n + y] = in[y * n + x];
    }
}

// blocks of 32 x 8 threads, each moving a 32 x 32 tile; PAD 0 reads the tile down a column (one bank), PAD 1 not
#define TRANSPOSE_TILED(NAME, PAD)                                                        \
extern "C" __global__ void NAME(const float* in, float* out, int n) {                    \
    __shared__ float tile[32][32 + PAD];                                                 \
    int x = blockIdx.x * 32 + threadIdx.x;                                               \
    int y = blockIdx.y * 32 + threadIdx.y;                                               \
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x]; \
    __syncthreads();                                                                     \
    x = blockIdx.y * 32 + threadIdx.x;                                                   \
    y = blockIdx.x * 32 + threadIdx.y;                                                   \
    for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j]; \
}
TRANSPOSE_TILED(transpose_tiled_conflicts, 0)
TRANSPOSE_TILED(transpose_tiled, 1)
"""

module = cp.RawModule(code=SOURCE, options=("-lineinfo",))
naive_gemm = module.get_function("naive_gemm")
tiled_gemm = module.get_function("tiled_gemm")
stream_add = module.get_function("stream_add")
strided_copy = module.get_function("strided_copy")
transpose_naive = module.get_function("transpose_naive")
transpose_tiled_conflicts = module.get_function("transpose_tiled_conflicts")
transpose_tiled = module.get_function("transpose_tiled")

N_GEMM = 2048
N_STREAM = 64 * 2**20  # floats: 256 MiB per array
N_STRIDED = 4 * 2**20  # outputs; the input spans 32x as many floats (512 MiB)
STRIDE = 32
N_TRANSPOSE = 8192

rng = cp.random.default_rng(0)
a = rng.standard_normal((N_GEMM, N_GEMM), dtype=cp.float32)
b = rng.standard_normal((N_GEMM, N_GEMM), dtype=cp.float32)
c_naive = cp.empty_like(a)
c_tiled = cp.empty_like(a)
x = rng.standard_normal(N_STREAM, dtype=cp.float32)
y = rng.standard_normal(N_STREAM, dtype=cp.float32)
z = cp.empty_like(x)
src = rng.standard_normal(N_STRIDED * STRIDE, dtype=cp.float32)
dst = cp.empty(N_STRIDED, dtype=cp.float32)
m = rng.standard_normal((N_TRANSPOSE, N_TRANSPOSE), dtype=cp.float32)
mt = cp.empty_like(m)

sms = cp.cuda.Device().attributes["MultiProcessorCount"]
for _ in range(2):
    naive_gemm((N_GEMM // 16, N_GEMM // 16), (16, 16), (a, b, c_naive, cp.int32(N_GEMM)))
    tiled_gemm((N_GEMM // 32, N_GEMM // 32), (32, 32), (a, b, c_tiled, cp.int32(N_GEMM)))
    stream_add((sms * 8,), (256,), (x, y, z, cp.int64(N_STREAM)))
    strided_copy((N_STRIDED // 256,), (256,), (src, dst, cp.int64(N_STRIDED), cp.int32(STRIDE)))
    transpose_naive((N_TRANSPOSE // 32, N_TRANSPOSE // 8), (32, 8), (m, mt, cp.int32(N_TRANSPOSE)))
mt_conflicts, mt_tiled = cp.empty_like(m), cp.empty_like(m)
for _ in range(2):
    grid = (N_TRANSPOSE // 32, N_TRANSPOSE // 32)
    transpose_tiled_conflicts(grid, (32, 8), (m, mt_conflicts, cp.int32(N_TRANSPOSE)))
    transpose_tiled(grid, (32, 8), (m, mt_tiled, cp.int32(N_TRANSPOSE)))
cp.cuda.Device().synchronize()
assert bool((mt_conflicts == mt).all()) and bool((mt_tiled == mt).all()), "the transposes disagree"
err = float(cp.abs(c_naive - c_tiled).max())
print(
    f"gemm max |naive - tiled| = {err:.3g}; stream sum {float(z[:1024].sum()):.4f}; strided {float(dst[:8].sum()):.4f}"
)
assert err < 1e-2, "the two GEMMs disagree"
