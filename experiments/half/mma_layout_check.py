"""The index logic of elementwise.cu's tensor-core kernels (output_forward_half, output_backward_half) run in
NumPy, lane by lane,
with mma.sync m16n8k16 and ldmatrix emulated from the PTX ISA's fragment tables: a check of which lane
holds which element, made without a GPU before the patch's first device call. Values are kept in float64
(the BF16 rounding is not what this checks). Usage: python experiments/half/mma_layout_check.py"""
import numpy as np

HB_ROWS, HB_COLS = 16, 128


def mma(d, a, b):
    """D += A B for one warp: a[lane] = 8 values (regs a0a1, a2a3, a4a5, a6a7), b[lane] = 4 (b0b1, b2b3),
    d[lane] = 4, laid out as the PTX ISA's tables for m16n8k16 say."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(8):
            A[g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)] = a[lane][i]
        for i in range(4):
            B[2 * t + i % 2 + 8 * (i // 2), g] = b[lane][i]
    D = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            d[lane][i] += D[g + 8 * (i // 2), 2 * t + i % 2]


def ldmatrix_x4(smem, pitch, addresses, trans):
    """Each lane's 4 regs (8 values): matrix j's rows are addressed by lanes 8j..8j+7; without .trans a
    lane holds row lane/4, columns 2(lane%4), +1; with .trans, rows 2(lane%4), +1 of column lane/4."""
    out = [[0.0] * 8 for _ in range(32)]
    for j in range(4):
        rows = [smem[addresses[8 * j + r]: addresses[8 * j + r] + 8] for r in range(8)]
        M = np.array(rows)
        for lane in range(32):
            g, t = lane // 4, lane % 4
            pair = (M[g, 2 * t], M[g, 2 * t + 1]) if not trans else (M[2 * t, g], M[2 * t + 1, g])
            out[lane][2 * j], out[lane][2 * j + 1] = pair
    return out


def kernel_block(W2, delta, a1, bx, by, dz1, part):
    """One block of output_backward_half, as the patch writes it (4 warps)."""
    C, H = W2.shape
    n = a1.shape[1]
    pitch = HB_COLS + 8
    j0 = bx * HB_COLS
    cols = min(HB_COLS, n - j0)
    smem = np.zeros(16 * pitch)
    for e in range(16 * HB_COLS):
        c, o = e // HB_COLS, e % HB_COLS
        within = o % 64
        at = c * pitch + (o - within) + 8 * ((within % 16) // 2) + 2 * (within // 16) + within % 2
        smem[at] = delta[c, j0 + o] if c < C and o < cols else 0.0
    for warp in range(4):
        h0 = (by * 4 + warp) * HB_ROWS
        w = []
        for lane in range(32):
            g, t = lane // 4, lane % 4
            regs = []
            for i in range(4):
                h, c = h0 + g + 8 * (i % 2), 2 * t + 8 * (i // 2)
                regs += [W2[c, h] if h < H and c < C else 0.0, W2[c + 1, h] if h < H and c + 1 < C else 0.0]
            w.append(regs)

        def load(h, j):
            return [a1[h, j + i] if h < H and j + i < n else 0.0 for i in range(16)]  # 8 words = 16 values
        P = [[[0.0] * 4 for _ in range(32)] for _ in range(2)]
        db = [[0.0, 0.0] for _ in range(32)]
        for c0 in range(0, cols, 64):
            a = [[load(h0 + lane // 4 + 8 * r, j0 + c0 + 16 * (lane % 4)) for r in range(2)] for lane in range(32)]
            out = [[list(a[lane][r]) for r in range(2)] for lane in range(32)]
            for q in range(4):
                addresses = [(lane % 16) * pitch + c0 + 16 * q + 8 * (lane // 16) for lane in range(32)]
                bt = ldmatrix_x4(smem, pitch, addresses, trans=True)
                am = ldmatrix_x4(smem, pitch, addresses, trans=False)
                for r in range(2):  # P += delta a1^T
                    b = [a[lane][r][4 * q: 4 * q + 4] for lane in range(32)]  # words 2q, 2q + 1
                    mma(P[r], am, b)
                for k in range(2):
                    d = [[0.0] * 4 for _ in range(32)]
                    mma(d, w, [bt[lane][4 * k: 4 * k + 4] for lane in range(32)])
                    for lane in range(32):
                        for r in range(2):
                            word = 2 * q + k
                            x0, x1 = a[lane][r][2 * word], a[lane][r][2 * word + 1]
                            v0, v1 = d[lane][2 * r] * x0 * (1 - x0), d[lane][2 * r + 1] * x1 * (1 - x1)
                            db[lane][r] += v0 + v1
                            out[lane][r][2 * word], out[lane][r][2 * word + 1] = v0, v1
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for r in range(2):
                    h, j = h0 + g + 8 * r, j0 + c0 + 16 * t
                    for i in range(16):
                        if h < H and j + i < n:
                            dz1[h, j + i] = out[lane][r][i]
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for r in range(2):
                h = h0 + 8 * r + 2 * t
                for i in range(4):
                    c, row = g + 8 * (i // 2), h + i % 2
                    if c < C and row < H:
                        part[bx, c, row] = P[r][lane][i]
            for r in range(2):
                s = sum(db[lane - lane % 4 + k][r] for k in range(4))  # the shuffles' sum over the row's 4 lanes
                if t == 0 and h0 + g + 8 * r < H:
                    part[bx, C, h0 + g + 8 * r] = s


FW_ROWS, HF_COLS = 128, 64


def forward_block(W2, b1, z1, bx, by, part):
    """One block of output_forward_half, as elementwise.cu writes it: 8 warps over 64 columns, warp w the
    block's 16-row K-tile w, summed over the warps (the shared `sums`) by warp q for n-tile q."""
    C, H = W2.shape
    n = z1.shape[1]
    jc = bx * HF_COLS
    sums = np.zeros((FW_ROWS // 16, 32, 32))
    for warp in range(FW_ROWS // 16):
        r0 = by * FW_ROWS + warp * 16
        wfrag, v = [], [[[0.0] * 8 for _ in range(4)] for _ in range(32)]
        for lane in range(32):
            g, t = lane // 4, lane % 4
            regs = []
            for i in range(4):
                c, h = g + 8 * (i % 2), r0 + 2 * t + 8 * (i // 2)
                regs += [W2[c, h] if c < C and h < H else 0.0, W2[c, h + 1] if c < C and h + 1 < H else 0.0]
            wfrag.append(regs)
            j = jc + 8 * g
            for m in range(4):
                h = r0 + 2 * t + m % 2 + 8 * (m // 2)
                for i in range(8):
                    if h < H:
                        z = z1[h, j + i] if j + i < n else 0.0
                        v[lane][m][i] = 1 / (1 + np.exp(-(z + b1[h])))
                        if j + i < n:
                            z1[h, j + i] = v[lane][m][i]
        for i in range(8):
            acc = [[0.0] * 4 for _ in range(32)]
            mma(acc, wfrag, [[v[lane][0][i], v[lane][1][i], v[lane][2][i], v[lane][3][i]] for lane in range(32)])
            for lane in range(32):
                for e in range(4):
                    sums[warp, 4 * i + e, lane] = acc[lane][e]
    for q in range(FW_ROWS // 16):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for e in range(4):
                c, col = g + 8 * (e // 2), jc + 16 * t + 8 * (e % 2) + q
                if c < C and col < n:
                    part[by, c, col] = sums[:, 4 * q + e, lane].sum()


def check_forward(C, H, n, seed=0):
    rng = np.random.default_rng(seed)
    W2, b1, z = rng.normal(size=(C, H)), rng.normal(size=H), rng.normal(size=(H, n))
    z1 = z.copy()
    groups = -(-H // FW_ROWS)
    part = np.full((groups, C, n), np.nan)
    for bx in range(-(-n // HF_COLS)):
        for by in range(groups):
            forward_block(W2, b1, z1, bx, by, part)
    a = 1 / (1 + np.exp(-(z + b1[:, None])))
    errors = [np.abs(z1 - a).max(), np.abs(part.sum(axis=0) - W2 @ a).max() / np.abs(W2 @ a).max()]
    print(f"forward C={C} H={H} n={n}: max error a1 {errors[0]:.1e}, max relative error W2 a1 {errors[1]:.1e}")
    assert np.all(np.array(errors) < 1e-12)  # NaN (an element never written) fails too


def check(C, H, n, seed=0):
    rng = np.random.default_rng(seed)
    W2, delta, a1 = rng.normal(size=(C, H)), rng.normal(size=(C, n)), rng.random((H, n))
    dz1 = np.full((H, n), np.nan)
    nb = -(-n // HB_COLS)
    part = np.full((nb, C + 1, H), np.nan)
    for bx in range(nb):
        for by in range(-(-H // (4 * HB_ROWS))):
            kernel_block(W2, delta, a1, bx, by, dz1, part)
    ref = (W2.T @ delta) * a1 * (1 - a1)
    dW2, db1 = part[:, :C].sum(axis=0), part[:, C].sum(axis=0)
    errors = [np.abs(x - y).max() / np.abs(y).max() for x, y in ((dz1, ref), (dW2, delta @ a1.T), (db1, ref.sum(axis=1)))]
    print(f"C={C} H={H} n={n}: max relative error dz1 {errors[0]:.1e}, dW2 {errors[1]:.1e}, db1 {errors[2]:.1e}")
    assert np.all(np.array(errors) < 1e-12)  # NaN (an element never written) fails too


if __name__ == "__main__":
    for C, H, n in ((10, 64, 320), (7, 61, 37), (16, 80, 300), (3, 17, 130)):
        check(C, H, n)
    for C, H, n in ((10, 256, 320), (7, 61, 37), (16, 200, 300), (3, 17, 130)):
        check_forward(C, H, n)
