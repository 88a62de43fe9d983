#!/usr/bin/env python3
# Desk check of pv_kernel's (backends/cuda/gqa_rope_backward_pv.cu) P staging and A-fragment reads, without a GPU: per
# item (128 query rows of one head) and 64-key tile, the P tile as issue_p_row stages it (each row's 16-byte chunks from
# its start less its phase, whole chunks inside the tensor by 16-byte copies, the tensor's first and last chunks element
# by element, zero outside it and for rows past S), then every lane's m16n8k16 A fragments as the kernel forms them (two
# 4-byte shared loads and a byte_perm by the row's phase, the key mask of the partial last tile), each element compared
# with P[q, key] (0 where the row or key is past S). Then O = P·V from those fragments (the B side: ldmatrix.trans's
# standard mapping, V's rows past S zero) against a direct P·V, in exact integer arithmetic.
# Run: python3 perf/probes/pv_kernel_sim.py
import random, struct

kD, kKeys, kStride, kPStride, kRows, kThreads = 128, 64, 136, 72, 128, 256
kKeyTile = kKeys * kStride


def p_shift(elem_addr):  # element offset of an element address within its 16-byte chunk (2-byte elements)
    return elem_addr & 7


def run(S, BH, seed, base_elems):
    rnd = random.Random(seed)
    n_el = BH * S * S
    P = [rnd.randrange(1, 2000) for _ in range(n_el)]  # nonzero: a misplaced zero or element shows
    V = [[rnd.randrange(-50, 50) for _ in range(kD)] for _ in range(BH * S)]
    pbeg = base_elems  # P's first element address (in elements; any alignment: base_elems need not be a multiple of 8)
    pend = pbeg + n_el

    def mem(a):  # element at element address a (inside the tensor)
        assert pbeg <= a < pend
        return P[a - pbeg]

    nb = (S + kRows - 1) // kRows
    n = (S + kKeys - 1) // kKeys
    checks = 0
    for bh in range(BH):
        for ib in range(nb):
            qc = ib * kRows
            O = [[0] * kD for _ in range(kRows)]
            for kt in range(n):
                k0 = kt * kKeys
                # the P tile (element-addressed shared memory of kRows rows × kPStride)
                tile = [0xDEAD] * (kRows * kPStride)
                for tid in range(kThreads):
                    p_row = tid // 2
                    valid = qc + p_row < S
                    row_start = pbeg + (bh * S + (qc + p_row)) * S if valid else pbeg + bh * S * S
                    src = row_start - p_shift(row_start)  # the kernel: p_src -= p_shift(p_src)
                    dst = p_row * kPStride
                    for j in range((9 + 1) // 2):
                        ch = tid % 2 + 2 * j
                        if ch >= 9:
                            break
                        d = dst + 8 * ch
                        s = src + k0 + 8 * ch
                        if not valid:
                            tile[d:d + 8] = [0] * 8
                        elif s >= pbeg and s + 8 <= pend:
                            assert s % 8 == 0, "a 16-byte copy from an unaligned address"
                            tile[d:d + 8] = [mem(s + e) for e in range(8)]
                        else:
                            tile[d:d + 8] = [mem(s + e) if pbeg <= s + e < pend else 0 for e in range(8)]
                partial = k0 + kKeys > S
                for warp in range(kThreads // 32):
                    for lane in range(32):
                        g, t = lane // 4, lane % 4
                        rl = warp * 16 + g
                        qa, qb = qc + rl, qc + rl + 8
                        sa = p_shift(pbeg + (bh * S + qa) * S)
                        sb = p_shift(pbeg + (bh * S + qb) * S)
                        oa = rl * kPStride + sa + 2 * t  # (+ kKeyTile in the kernel: an even offset, parity kept)
                        ob = (rl + 8) * kPStride + sb + 2 * t

                        def pair(off):
                            w = off & ~1
                            assert w + 3 < kRows * kPStride and (w // kPStride) == ((w + 3) // kPStride), "row overrun"
                            lo, hi = (tile[w], tile[w + 1]) if off % 2 == 0 else (tile[w + 1], tile[w + 2])
                            return [lo, hi]

                        for kk in range(kKeys // 16):
                            a = [pair(oa + 16 * kk), pair(ob + 16 * kk), pair(oa + 16 * kk + 8), pair(ob + 16 * kk + 8)]
                            if partial:
                                lim = (S - k0) - 16 * kk - 2 * t
                                for e in range(4):
                                    l = lim - (8 if e >= 2 else 0)
                                    a[e] = a[e] if l >= 2 else [a[e][0], 0] if l == 1 else [0, 0]
                            # (row, key) of each element: a0/a2 row rl, a1/a3 row rl + 8; keys 2t, 2t+1 (+8 for a2, a3)
                            for e in range(4):
                                row = rl + (8 if e % 2 else 0)
                                q = qc + row
                                for x in range(2):
                                    key = k0 + 16 * kk + 2 * t + x + (8 if e >= 2 else 0)
                                    want = P[(bh * S + q) * S + key] if q < S and key < S else 0
                                    assert a[e][x] == want, (S, BH, bh, qc, k0, warp, lane, kk, e, x, a[e][x], want)
                                    checks += 1
                                    if q < S and key < S:
                                        vrow = V[bh * S + key]
                                        orow = O[row]
                                        for d in range(kD):
                                            orow[d] += a[e][x] * vrow[d]
            for r in range(kRows):
                q = qc + r
                if q >= S:
                    continue
                want = [sum(P[(bh * S + q) * S + k] * V[bh * S + k][d] for k in range(S)) for d in range(kD)]
                assert O[r] == want, ("O", S, bh, q)
    return checks


if __name__ == "__main__":
    total = 0
    for S, BH, base in [(1, 2, 0), (7, 2, 3), (64, 1, 0), (65, 2, 5), (75, 1, 1), (128, 1, 0), (131, 2, 7),
                        (130, 1, 2), (200, 1, 6), (293, 1, 0)]:
        c = run(S, BH, seed=S * 31 + BH, base_elems=base)
        total += c
        print(f"S={S} BH={BH} P at element {base} mod 8: {c} fragment elements equal")
    print(f"all equal ({total} checks)")
